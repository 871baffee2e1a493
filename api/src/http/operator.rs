//! Operator routes: the service's own staff, with the operator credential only. No partner
//! key is accepted here, and an operator key is accepted nowhere else.
use chrono::SecondsFormat;
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi, SecurityScheme,
    auth::ApiKey,
    param::{Path, Query},
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    body::{JsonBody, Validate},
    reply::Reply,
    tags::Tag,
};
use crate::{
    domain::{
        operators::{self, Operator},
        validate::{self, Errors},
    },
    envelope::Page,
    error::ApiError,
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
pub struct OperatorAuth(Operator);

async fn operator_checker(req: &poem::Request, key: ApiKey) -> poem::Result<Operator> {
    let st = req
        .data::<AppState>()
        .ok_or_else(|| ApiError::internal("AppState missing from the request"))?;
    Ok(operators::authenticate(&st.db, &key.key).await?)
}

pub struct OperatorApi;

/// Why the operator acts (kept in the audit log).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OperatorAction {
    #[serde(default)]
    pub reason: String,
}

impl Validate for OperatorAction {
    fn validate(&self, e: &mut Errors) {
        validate::length(e, "/reason", &self.reason, 1, 500);
        validate::no_control_chars(e, "/reason", &self.reason);
    }
}

/// An integration's status.
#[derive(Object, Serialize)]
pub struct IntegrationStatus {
    pub integration_id: String,
    /// `ACTIVE` or `SUSPENDED`.
    pub status: String,
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

fn integration_id(raw: &str) -> Result<Uuid, ApiError> {
    let mut e = Errors::default();
    validate::uuid(&mut e, "path:integrationId", raw).ok_or_else(|| ApiError::validation(e.0))
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
        state: Data<&AppState>,
        auth: OperatorAuth,
        integration_id: Path<String>,
        body: JsonBody<OperatorAction>,
    ) -> poem::Result<Reply<IntegrationStatus>> {
        self.set(
            state.0,
            &auth.0,
            &integration_id.0,
            "SUSPENDED",
            body.value.reason,
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
        state: Data<&AppState>,
        auth: OperatorAuth,
        integration_id: Path<String>,
        body: JsonBody<OperatorAction>,
    ) -> poem::Result<Reply<IntegrationStatus>> {
        self.set(
            state.0,
            &auth.0,
            &integration_id.0,
            "ACTIVE",
            body.value.reason,
        )
        .await
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
        /// 1 to 200, default 50.
        limit: Query<Option<u64>>,
        cursor: Query<Option<String>>,
    ) -> poem::Result<Reply<Vec<AuditEntry>>> {
        let limit = limit.0.unwrap_or(50);
        let mut e = Errors::default();
        if !(1..=200).contains(&limit) {
            e.push("query:limit", "out_of_range", "must be between 1 and 200");
        }
        let before = cursor
            .0
            .as_deref()
            .and_then(|c| validate::uuid(&mut e, "query:cursor", c));
        e.finish()?;
        let mut rows = store::operators::audit_page(&state.0.db, before, limit + 1)
            .await
            .map_err(ApiError::from)?;
        let more = rows.len() as u64 > limit;
        rows.truncate(limit as usize);
        let page = Page {
            next_cursor: if more {
                rows.last().map(|r| r.id.to_string())
            } else {
                None
            },
            has_more: more,
        };
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
    async fn set(
        &self,
        st: &AppState,
        op: &Operator,
        raw_id: &str,
        status: &str,
        reason: String,
    ) -> poem::Result<Reply<IntegrationStatus>> {
        let id = integration_id(raw_id)?;
        let i = operators::set_integration_status(&st.db, &st.key_auth(), op, id, status, reason)
            .await?;
        Ok(Reply::ok(&IntegrationStatus {
            integration_id: i.id.to_string(),
            status: i.status,
        }))
    }
}
