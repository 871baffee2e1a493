//! Operator routes: the service's own staff, with the operator credential only. No partner
//! key is accepted here, and an operator key is accepted nowhere else. This file holds the
//! credential, integrations and the audit log; dead letters, webhook endpoints and wallets
//! have files of their own. Every action takes an optional Idempotency-Key and replays as a
//! partner's mutation does.
pub mod dead_letters;
pub mod risk;
pub mod wallets;
pub mod webhooks;
use crate::http::pipeline::fields::Text;
use crate::http::pipeline::fields::{Cursor, PageLimit, UuidText};
use crate::http::pipeline::query_group::{Grouped, query_group};
use chrono::SecondsFormat;
use poem::web::Data;
use poem_openapi::{Object, OpenApi, SecurityScheme, auth::ApiKey, param::Path};
use serde::{Deserialize, Serialize};

use crate::http::pipeline::common::path_uuid;
use crate::http::{
    openapi::tags::Tag,
    pipeline::body::{JsonBody, Validate},
    pipeline::mutation::OptionalKey,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        operators::{self, Operator},
        validate::Errors,
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
    store,
};

/// The operator credential (`wallet-api operator create`), in the `x-operator-key` header.
#[derive(SecurityScheme)]
#[oai(
    rename = "OperatorKey",
    ty = "api_key",
    key_name = "x-operator-key",
    key_in = "header",
    checker = "operator_checker"
)]
pub struct OperatorAuth(pub Operator);

async fn operator_checker(req: &poem::Request, key: ApiKey) -> poem::Result<Operator> {
    let st = req
        .data::<AppState>()
        .ok_or_else(|| ApiError::internal("AppState missing from the request"))?;
    let client = crate::infra::current_request::client_address(req.remote_addr());
    let attempt = operators::sign_in::Attempt {
        budget: operators::sign_in::Budget::of(&st.config),
        key: &key.key,
        client: &client,
        surface: "api",
    };
    let operator = operators::sign_in::sign_in(&st.db, &st.kv, &attempt).await?;
    crate::infra::current_request::set_caller(operator.id);
    Ok(operator)
}

pub struct OperatorApi;

/// Why the operator acts (kept in the audit log).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OperatorAction {
    #[serde(default)]
    pub reason: Text<1, 500>,
}

impl Validate for OperatorAction {
    fn validate(&self, e: &mut Errors) {
        self.reason.check(e, "/reason");
    }
}

/// An integration's status.
#[derive(Object, Serialize)]
pub struct IntegrationStatus {
    pub integration_id: String,
    /// `ACTIVE` or `SUSPENDED`.
    pub status: String,
}

/// Which identity credential types an integration may use.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct IdentifyCredentialTypesRequest {
    /// A non-empty subset of phone, card_fingerprint, short_code, provider_customer_id, qr.
    #[serde(default)]
    pub credential_types: crate::http::pipeline::fields::List<
        crate::http::pipeline::fields::Field<
            crate::http::pipeline::fields::OneOf<
                crate::http::pipeline::fields::IdentityCredentialTypes,
            >,
        >,
        1,
        5,
    >,
    #[serde(default)]
    pub reason: Text<1, 500>,
}

impl Validate for IdentifyCredentialTypesRequest {
    fn validate(&self, e: &mut Errors) {
        self.credential_types.check(e, "/credential_types");
        for (i, t) in self.credential_types.iter().enumerate() {
            t.check(e, &format!("/credential_types/{i}"));
        }
        self.reason.check(e, "/reason");
    }
}

/// The identity credential types an integration may use.
#[derive(Object, Serialize)]
pub struct IdentifyCredentialTypes {
    pub integration_id: String,
    pub credential_types: Vec<String>,
}

/// The browser origins an integration's web apps call from (CORS); the list replaces the
/// one before.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CorsOriginsRequest {
    /// Up to 20 origins, each `https://host[:port]` (plain `http` for localhost only), with no
    /// path. Empty: no browser may call. Only operations that take a terminal JWT are ever
    /// offered to a browser.
    pub origins: crate::http::pipeline::fields::List<crate::http::pipeline::fields::Origin, 0, 20>,
    #[serde(default)]
    pub reason: Text<1, 500>,
}

impl Validate for CorsOriginsRequest {
    fn validate(&self, e: &mut Errors) {
        self.origins.check(e, "/origins");
        for (i, o) in self.origins.iter().enumerate() {
            o.check(e, &format!("/origins/{i}"));
        }
        self.reason.check(e, "/reason");
    }
}

#[derive(Object, Serialize)]
pub struct CorsOrigins {
    pub integration_id: String,
    pub origins: Vec<String>,
}

/// One audited operator action.
#[derive(Object, Serialize)]
pub struct AuditEntry {
    pub audit_id: String,
    pub actor: String,
    pub action: String,
    pub target_type: String,
    #[oai(nullable)]
    pub target_id: Option<String>,
    #[oai(nullable)]
    pub reason: Option<String>,
    pub details: serde_json::Value,
    pub created_at: String,
}

query_group! {
    /// Which audit entries, and the page.
    pub struct AuditQuery {
        /// Only this actor (as listed, e.g. `operator:<id>:<name>` or `cli:<user>`).
        actor: Option<String> = "actor",
        /// Only this action (e.g. `dead_letter.replay`, `integration.suspend`).
        action: Option<String> = "action",
        /// Only entries about this object (an integration or dead letter id).
        target_id: Option<String> = "target_id",
        /// 1 to 200, default 50.
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

#[OpenApi(tag = "Tag::Platform")]
impl OperatorApi {
    /// Suspend an integration (operators)
    ///
    /// Every key of the integration stops working at once, on every replica. Audited.
    #[oai(
        path = "/operator/integrations/:integration_id/suspend",
        method = "post",
        operation_id = "operatorSuspendIntegration"
    )]
    async fn suspend(
        &self,
        auth: OperatorAuth,
        integration_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<OperatorAction>,
    ) -> poem::Result<Reply<IntegrationStatus>> {
        self.set(
            key,
            &auth,
            &integration_id.0,
            operators::IntegrationChange::Suspend,
            &body,
        )
        .await
    }

    /// Reactivate an integration (operators)
    #[oai(
        path = "/operator/integrations/:integration_id/reactivate",
        method = "post",
        operation_id = "operatorReactivateIntegration"
    )]
    async fn reactivate(
        &self,
        auth: OperatorAuth,
        integration_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<OperatorAction>,
    ) -> poem::Result<Reply<IntegrationStatus>> {
        self.set(
            key,
            &auth,
            &integration_id.0,
            operators::IntegrationChange::Reactivate,
            &body,
        )
        .await
    }

    /// Set an integration's identity credential types (operators)
    ///
    /// What `POST /identify`, checkout-session identification, claims and the lookup
    /// accept from this integration, and what `GET /capabilities` reports. Audited.
    #[oai(
        path = "/operator/integrations/:integration_id/identify-credential-types",
        method = "post",
        operation_id = "operatorSetIdentifyCredentialTypes"
    )]
    async fn set_identify_types(
        &self,
        auth: OperatorAuth,
        integration_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<IdentifyCredentialTypesRequest>,
    ) -> poem::Result<Reply<IdentifyCredentialTypes>> {
        let id = path_uuid("path:integrationId", &integration_id.0)?;
        let b = &body.value;
        let types: Vec<String> = b.credential_types.iter().map(|t| t.to_string()).collect();
        let (state, op) = (key.state(), &auth.0);
        let reply = key
            .run_as_operator(&auth.0, &body.json, async move |txn| {
                let reason = b.reason.to_string();
                let i =
                    operators::set_identify_credential_types(txn, op, id, &types, reason).await?;
                Ok(Outcome::new(IdentifyCredentialTypes {
                    integration_id: i.id.to_string(),
                    credential_types: serde_json::from_value(i.identify_credential_types)
                        .map_err(ApiError::internal)?,
                }))
            })
            .await?;
        state.capabilities.clear();
        Ok(reply)
    }

    /// Set an integration's browser origins (operators)
    ///
    /// The origins from which a browser app of this integration (a wallet app minting QR
    /// codes, a web POS) may call the operations that take a terminal JWT. None by default.
    /// Other replicas apply a change within 30 seconds. Audited.
    #[oai(
        path = "/operator/integrations/:integration_id/cors-origins",
        method = "post",
        operation_id = "operatorSetCorsOrigins"
    )]
    async fn set_cors_origins(
        &self,
        auth: OperatorAuth,
        integration_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<CorsOriginsRequest>,
    ) -> poem::Result<Reply<CorsOrigins>> {
        let id = path_uuid("path:integrationId", &integration_id.0)?;
        let b = &body.value;
        let mut origins: Vec<String> = b
            .origins
            .iter()
            .filter_map(|o| crate::domain::platform::cors::normalize_origin(o).ok())
            .collect();
        origins.sort();
        origins.dedup();
        let (state, op) = (key.state(), &auth.0);
        let reply = key
            .run_as_operator(&auth.0, &body.json, async move |txn| {
                let reason = b.reason.to_string();
                operators::set_cors_origins(txn, op, id, &origins, reason).await?;
                Ok(Outcome::new(CorsOrigins {
                    integration_id: id.to_string(),
                    origins,
                }))
            })
            .await?;
        state.cors.clear();
        Ok(reply)
    }

    /// Operator audit log (operators)
    ///
    /// Every operator action, newest first, cursor-paginated.
    #[oai(
        path = "/operator/audit-log",
        method = "get",
        operation_id = "operatorAuditLog"
    )]
    async fn audit_log(
        &self,
        state: Data<&AppState>,
        _auth: OperatorAuth,
        query: Grouped<AuditQuery>,
    ) -> poem::Result<Reply<Vec<AuditEntry>>> {
        let AuditQuery {
            actor,
            action,
            target_id,
            limit,
            cursor,
        } = query.0;
        let mut e = Errors::default();
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let before = crate::http::pipeline::cursor::after("audit", &cursor)?;
        let f = store::credentials::operators::AuditFilter {
            actor,
            action,
            target_id,
            ..Default::default()
        };
        let rows = store::credentials::operators::audit_page(&state.0.db, &f, before, limit + 1)
            .await
            .map_err(ApiError::from)?;
        let (rows, more) = crate::domain::page_of(rows, limit);
        let page = crate::http::pipeline::cursor::page("audit", &rows, more, |r| r.id);
        let items: Vec<AuditEntry> = rows
            .into_iter()
            .map(|r| AuditEntry {
                audit_id: r.id.to_string(),
                actor: r.actor,
                action: r.action,
                target_type: r.target_type,
                target_id: r.target_id,
                reason: r.reason,
                details: r.details,
                created_at: r.created_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            })
            .collect();
        Ok(Reply::page(&items, &page))
    }
}

impl OperatorApi {
    /// A change of standing: published before its transaction (a suspension), settled after
    /// it by how it ended (`domain::operators::settle_status_change`), never for a replay.
    async fn set(
        &self,
        key: OptionalKey<'_>,
        auth: &OperatorAuth,
        raw_id: &str,
        change: operators::IntegrationChange,
        body: &JsonBody<OperatorAction>,
    ) -> poem::Result<Reply<IntegrationStatus>> {
        let id = path_uuid("path:integrationId", raw_id)?;
        let st = key.state();
        let (key_auth, standing) = (st.key_auth(), st.standing());
        let reason = body.value.reason.to_string();
        let op = &auth.0;
        let reply = key
            .run_as_operator_prepared(
                &auth.0,
                &body.json,
                async || {
                    operators::prepare_status_change(&st.db, &key_auth, &standing, id, change).await
                },
                async move |txn, ()| {
                    let i = operators::set_integration_status(txn, op, id, change, reason).await?;
                    Ok(Outcome::new(IntegrationStatus {
                        integration_id: i.id.to_string(),
                        status: i.status.as_str().to_string(),
                    }))
                },
            )
            .await;
        let settled = match &reply {
            Ok(r) if r.replayed() => operators::Settled::Replayed,
            Ok(_) => operators::Settled::Committed,
            Err(_) => operators::Settled::Failed,
        };
        operators::settle_status_change(&st.db, &standing, id, change, settled).await?;
        reply
    }
}
