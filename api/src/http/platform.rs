//! Discovery: health, capabilities and the live OpenAPI document.
use std::sync::Arc;

use poem_openapi::{Object, OpenApi};
use serde::Serialize;
use serde_json::{Value, value::RawValue};

use crate::http::{
    openapi::document::OpenApiInfo, openapi::tags::Tag, pipeline::auth::AnyAuth,
    pipeline::reply::Reply,
};
use crate::{
    domain::credentials::{CredentialKind, Principal},
    domain::platform,
    envelope,
    error::ApiError,
    state::AppState,
};

pub struct PlatformApi;

/// Service health. `status` is `ok` or `degraded`.
#[derive(Object, Serialize)]
pub struct HealthView {
    /// `ok`, or `degraded` when a subsystem is down (the process keeps answering).
    pub status: String,
    /// Subsystems that are down: `database`, `redis`, `queue`.
    pub degraded_subsystems: Vec<String>,
    /// `embedded` (SQLite, single process) or `production` (PostgreSQL + Redis).
    pub mode: String,
    /// Build version of the service.
    pub version: String,
}

impl From<crate::state::Health> for HealthView {
    fn from(h: crate::state::Health) -> Self {
        HealthView {
            status: if h.degraded.is_empty() {
                "ok"
            } else {
                "degraded"
            }
            .into(),
            degraded_subsystems: h.degraded.iter().map(|s| s.as_str().to_string()).collect(),
            mode: h.mode.into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// An operation the caller's credential can call now.
#[derive(Object, Serialize, Clone)]
pub struct OperationView {
    pub operation_id: String,
    pub method: String,
    /// Path under the base URL (`/v1`).
    pub path: String,
    /// The domain tag.
    pub domain: String,
    /// `ga` or `beta`.
    pub stability: String,
}

/// The calling credential as the service sees it.
#[derive(Object, Serialize)]
pub struct CredentialView {
    /// `api_key` or `terminal_jwt`.
    pub kind: String,
    /// `integration`, `enterprise`, `brand` or `branch`.
    pub scope: String,
    pub integration_id: String,
    #[oai(nullable)]
    pub enterprise_id: Option<String>,
    #[oai(nullable)]
    pub brand_id: Option<String>,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    pub is_sandbox: bool,
    /// What the credential may do (see `POST /auth/keys`); `operations` lists only the
    /// operations these allow. A terminal JWT holds `terminal`.
    pub permissions: Vec<String>,
}

/// A wallet program the caller may act on.
#[derive(Object, Serialize)]
pub struct ProgramView {
    pub wallet_program_id: String,
    pub merchant_id: String,
    pub currency: String,
}

/// Feature flags: a client must not assume a feature that is not true here.
#[derive(Object, Serialize)]
pub struct FeatureFlags {
    pub sandbox: bool,
    pub idempotency: bool,
    pub cursor_pagination: bool,
    pub webhooks: bool,
}

/// What the calling credential can do.
#[derive(Object, Serialize)]
pub struct CapabilitiesView {
    pub credential: CredentialView,
    pub api_versions: Vec<String>,
    pub operations: Vec<OperationView>,
    /// ISO-4217 codes of the caller's active wallet programs.
    pub currencies: Vec<String>,
    pub wallet_programs: Vec<ProgramView>,
    /// Credential types `POST /v1/identify` accepts for this integration.
    pub supported_identify_credential_types: Vec<String>,
    /// Credential types `POST /v1/payments` accepts.
    pub supported_payment_credential_types: Vec<String>,
    pub features: FeatureFlags,
}

#[OpenApi(tag = "Tag::Platform")]
impl PlatformApi {
    /// Service health
    ///
    /// No credential needed. Always HTTP 200 while the process runs; `status` says
    /// whether every subsystem answers.
    #[oai(path = "/health", method = "get", operation_id = "getHealth")]
    async fn health(&self, state: poem::web::Data<&AppState>) -> Reply<HealthView> {
        Reply::ok(&HealthView::from(state.0.health().await))
    }

    /// Capabilities of the calling credential
    ///
    /// Enabled operations, currencies, credential types and feature flags for the caller.
    /// Clients must not assume an operation or enum value beyond what this returns.
    /// Each API replica keeps the answer for a credential for up to 5 s, so an
    /// operator's change to the integration can take that long to show here (it takes
    /// effect on the operations themselves at once).
    #[oai(
        path = "/capabilities",
        method = "get",
        operation_id = "getCapabilities"
    )]
    async fn capabilities(
        &self,
        state: poem::web::Data<&AppState>,
        doc: poem::web::Data<&Arc<OpenApiInfo>>,
        auth: AnyAuth,
    ) -> poem::Result<Reply<CapabilitiesView>> {
        let p = auth.principal();
        let key = platform::CapabilitiesKey::of(p);
        let data = match state.0.capabilities.get(&key) {
            Some(data) => data,
            None => {
                let view = capabilities_view(state.0, doc.0, p).await?;
                let data: Arc<RawValue> = serde_json::value::to_raw_value(&view)
                    .map_err(ApiError::internal)?
                    .into();
                state.0.capabilities.insert(key, data.clone());
                data
            }
        };
        Ok(Reply::rendered(envelope::ok(&*data)))
    }

    /// The live OpenAPI 3.1 document
    ///
    /// `data` is the document. The same document, unwrapped, is served at
    /// `/v1/openapi.json` for tooling and behind the interactive docs at `/v1/docs`.
    #[oai(path = "/openapi", method = "get", operation_id = "getOpenApi")]
    async fn openapi(
        &self,
        doc: poem::web::Data<&Arc<OpenApiInfo>>,
        _auth: AnyAuth,
    ) -> Reply<serde_json::Value> {
        let doc: &Value = &doc.0.document;
        Reply::ok(doc)
    }
}

/// What `GET /capabilities` answers for this principal, computed from the database.
async fn capabilities_view(
    state: &AppState,
    doc: &OpenApiInfo,
    p: &Principal,
) -> Result<CapabilitiesView, ApiError> {
    let caps = platform::capabilities(&state.db, p).await?;
    let scheme = match p.kind {
        CredentialKind::ApiKey => "ApiKeyAuth",
        CredentialKind::TerminalJwt => "PosTerminalJWT",
    };
    let operations = doc
        .operations
        .iter()
        .filter(|o| o.schemes.is_empty() || o.schemes.iter().any(|s| s == scheme))
        .filter(|o| o.permission.is_none_or(|need| p.permissions.has(need)))
        .map(|o| OperationView {
            operation_id: o.operation_id.clone(),
            method: o.method.clone(),
            path: o.path.clone(),
            domain: o.domain.clone(),
            stability: o.stability.clone(),
        })
        .collect();
    let s = &p.scope;
    Ok(CapabilitiesView {
        credential: CredentialView {
            kind: match p.kind {
                CredentialKind::ApiKey => "api_key",
                CredentialKind::TerminalJwt => "terminal_jwt",
            }
            .into(),
            scope: s.name().into(),
            integration_id: p.integration_id.to_string(),
            enterprise_id: s.enterprise_id().map(|u| u.to_string()),
            brand_id: s.brand_id().map(|u| u.to_string()),
            branch_id: s.branch_id().map(|u| u.to_string()),
            is_sandbox: p.is_sandbox,
            permissions: p.permissions.names(),
        },
        api_versions: crate::envelope::SUPPORTED_API_VERSIONS
            .iter()
            .map(|v| v.to_string())
            .collect(),
        operations,
        currencies: caps.currencies,
        wallet_programs: caps
            .programs
            .into_iter()
            .map(|p| ProgramView {
                wallet_program_id: p.id.to_string(),
                merchant_id: p.enterprise_id.to_string(),
                currency: p.currency,
            })
            .collect(),
        supported_identify_credential_types: caps.identify_credential_types,
        supported_payment_credential_types: caps.payment_credential_types,
        features: FeatureFlags {
            sandbox: p.is_sandbox,
            idempotency: true,
            cursor_pagination: true,
            webhooks: true,
        },
    })
}
