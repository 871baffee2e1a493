//! Key lifecycle: minting per-merchant keys.
use chrono::{DateTime, SecondsFormat, Utc};
use poem_openapi::{Object, OpenApi, param::Header};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    auth::ApiKeyAuth,
    body::{JsonBody, Validate},
    common::{RequestContext, RequestMeta},
    reply::Reply,
    tags::Tag,
};
use crate::{
    domain::{
        credentials::keys::{self, CreateKey},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::{self, Outcome},
    state::AppState,
};

pub struct KeysApi;

/// Mint a key for a merchant, one of its brands, or one branch.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CreateKeyRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The merchant (UUID); must equal `context.merchant_id`.
    #[serde(default)]
    pub enterprise_id: String,
    /// Narrows the key to one brand of the enterprise.
    #[oai(nullable)]
    pub brand_id: Option<String>,
    /// Narrows the key to one branch of the brand (needs `brand_id`).
    #[oai(nullable)]
    pub branch_id: Option<String>,
    /// Up to 120 characters.
    #[oai(nullable)]
    pub label: Option<String>,
    /// When the key stops working (RFC 3339, in the future); null never expires.
    #[oai(nullable)]
    pub expires_at: Option<String>,
}

impl Validate for CreateKeyRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if self.enterprise_id.is_empty() {
            e.push("/enterprise_id", "required", "is required (a UUID)");
        } else if validate::uuid(e, "/enterprise_id", &self.enterprise_id).is_some()
            && self.context.merchant_id != self.enterprise_id
            && !self.context.merchant_id.is_empty()
        {
            e.push(
                "/enterprise_id",
                "merchant_mismatch",
                "must equal context.merchant_id",
            );
        }
        if let Some(b) = &self.brand_id {
            validate::uuid(e, "/brand_id", b);
        }
        if let Some(b) = &self.branch_id {
            validate::uuid(e, "/branch_id", b);
            if self.brand_id.is_none() {
                e.push("/brand_id", "required", "is required when branch_id is set");
            }
        }
        if let Some(l) = &self.label {
            validate::length(e, "/label", l, 0, 120);
            validate::no_control_chars(e, "/label", l);
        }
        if let Some(t) = &self.expires_at
            && let Some(at) = validate::rfc3339(e, "/expires_at", t)
        {
            validate::future(e, "/expires_at", at, Utc::now());
        }
    }
}

impl CreateKeyRequest {
    fn to_domain(&self) -> CreateKey {
        let id = |s: &Option<String>| s.as_deref().and_then(|v| Uuid::parse_str(v).ok());
        CreateKey {
            enterprise_id: Uuid::parse_str(&self.enterprise_id).unwrap_or_default(),
            brand_id: id(&self.brand_id),
            branch_id: id(&self.branch_id),
            label: self.label.clone().unwrap_or_default(),
            expires_at: self
                .expires_at
                .as_deref()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc)),
        }
    }
}

/// A new key. `raw_key` is shown here once (and in an idempotent replay of this create).
#[derive(Object, Serialize)]
pub struct ApiKeyCreated {
    pub key_id: String,
    /// `<prefix>_<segment>_<base64url>`; the segment is opaque, never parse it.
    pub raw_key: String,
    pub key_prefix: String,
    pub key_last_four: String,
    /// `enterprise`, `brand` or `branch`.
    pub scope: String,
    pub enterprise_id: String,
    #[oai(nullable)]
    pub brand_id: Option<String>,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    pub label: String,
    pub is_sandbox: bool,
    /// `active`.
    pub status: String,
    #[oai(nullable)]
    pub expires_at: Option<String>,
    pub created_at: String,
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[OpenApi(tag = "Tag::Auth")]
impl KeysApi {
    /// Create an API key
    ///
    /// Mints an enterprise, brand or branch key within the caller's own scope. The raw key
    /// is returned once; only its bcrypt hash is stored. Retrying with the same
    /// Idempotency-Key and body returns the same key.
    #[oai(path = "/auth/keys", method = "post", operation_id = "createApiKey")]
    async fn create(
        &self,
        state: poem::web::Data<&AppState>,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: Header<Option<String>>,
        body: JsonBody<CreateKeyRequest>,
    ) -> poem::Result<Reply<ApiKeyCreated>> {
        let st = state.0;
        let key = idempotency::parse_key(idempotency_key.0.as_deref())?;
        let principal = auth.0;
        let req = body.value.to_domain();
        let request = idempotency::Request::new(&principal, key, "POST /v1/auth/keys", &body.json);
        let minted = keys::mint(principal.is_sandbox, st.config.bcrypt_cost).await?;
        let rendered = idempotency::execute(st.idempotency(), request, move |txn| {
            Box::pin(async move {
                let raw = minted.key.raw.clone();
                let m = keys::create(txn, &principal, req, minted).await?;
                Ok(Outcome {
                    data: ApiKeyCreated {
                        key_id: m.id.to_string(),
                        raw_key: raw.clone(),
                        key_prefix: m.key_prefix,
                        key_last_four: m.key_last_four,
                        scope: m.scope,
                        enterprise_id: m.enterprise_id.map(|u| u.to_string()).unwrap_or_default(),
                        brand_id: m.brand_id.map(|u| u.to_string()),
                        branch_id: m.branch_id.map(|u| u.to_string()),
                        label: m.label,
                        is_sandbox: m.is_sandbox,
                        status: m.status,
                        expires_at: m.expires_at.map(ts),
                        created_at: ts(m.created_at),
                    },
                    secret: Some(raw),
                })
            })
        })
        .await
        .map_err(|e: ApiError| -> poem::Error { e.into() })?;
        Ok(Reply::rendered(rendered))
    }
}
