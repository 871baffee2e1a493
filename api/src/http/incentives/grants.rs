//! A customer's promotional grants: the list (`/customers/{id}/grants`) and an
//! operator's clawback of one (`/grants/{id}/clawback`).
use crate::http::pipeline::fields::Text;
use crate::http::pipeline::fields::{
    Cursor, Field, GrantSources, GrantStates, OneOf, PageLimit, UuidText,
};
use crate::http::pipeline::query_group::{Grouped, query_group};
use chrono::Utc;
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::{
    customers::balance::BalanceView,
    customers::{GrantItem, grant_item},
    openapi::tags::Tag,
    operator::OperatorAuth,
    pipeline::auth::AnyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::path_uuid,
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{incentives::grants, validate::Errors},
    idempotency::Outcome,
    state::AppState,
};

// --- Grants ------------------------------------------------------------------------------

/// Claw back a grant.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ClawbackRequest {
    /// Why (kept in the audit log and the event), 1 to 500 characters.
    #[serde(default)]
    pub reason: Text<1, 500>,
}

impl Validate for ClawbackRequest {
    fn validate(&self, e: &mut Errors) {
        self.reason.check(e, "/reason");
    }
}

/// What a clawback removed.
#[derive(Object, Serialize)]
pub struct ClawbackResult {
    pub grant: GrantItem,
    /// The unspent remainder removed (0 when the grant was already clawed back).
    pub clawed_back_minor: i64,
    pub wallet_id: String,
    pub balance_after: BalanceView,
}

pub struct GrantsApi;

query_group! {
    /// A customer's grants: which, and the page.
    pub struct GrantQuery {
        merchant_id: Option<UuidText> = "merchant_id",
        grant_state: Option<Field<OneOf<GrantStates>>> = "state",
        source: Option<Field<OneOf<GrantSources>>> = "source",
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

#[OpenApi]
impl GrantsApi {
    /// List a customer's grants
    ///
    /// The promotional grants of a customer (`customerId` is the `wallet_user_id`) in every
    /// state, newest first, optionally filtered by `state` (LOCKED, RELEASED, CONSUMED,
    /// EXPIRED, CLAWED_BACK) and `source` (CASHBACK, RELOAD_BONUS, SKU_TOPUP_BONUS).
    /// Cursor-paginated (`limit` 1–200, default 50; pass `meta.next_cursor` as `cursor`).
    /// Another tenant's customer is NOT_FOUND.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(
        path = "/customers/:customer_id/grants",
        method = "get",
        operation_id = "listCustomerGrants",
        tag = "Tag::Incentives"
    )]
    async fn list_grants(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        customer_id: Path<UuidText>,
        query: Grouped<GrantQuery>,
    ) -> poem::Result<Reply<Vec<GrantItem>>> {
        auth.require(Permission::Terminal)?;
        let st = state.0;
        let id = path_uuid("path:customerId", &customer_id.0)?;
        let GrantQuery {
            merchant_id,
            grant_state,
            source,
            limit,
            cursor,
        } = query.0;
        let mut e = Errors::default();
        if let Some(s) = &grant_state {
            s.check(&mut e, "query:state");
        }
        if let Some(s) = &source {
            s.check(&mut e, "query:source");
        }
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("grant", &cursor)?;
        let merchant =
            crate::http::customers::merchant_of(st, auth.principal(), &merchant_id).await?;
        let (rows, more) = grants::list(
            &st.db,
            merchant,
            id,
            grant_state.as_deref(),
            source.as_deref(),
            after,
            limit,
        )
        .await?;
        let page = crate::http::pipeline::cursor::page("grant", &rows, more, |g| g.id);
        Ok(Reply::page(
            &rows.iter().map(grant_item).collect::<Vec<_>>(),
            &page,
        ))
    }

    /// Claw back a grant (operators)
    ///
    /// Removes the unspent remainder of a promotional grant (state CLAWED_BACK, event
    /// promo_grant.clawed_back); what was already spent stays spent and actual money is
    /// never touched. Clawing back a clawed-back grant changes nothing; a grant that was
    /// spent in full or expired has nothing to claw back (VALIDATION_ERROR). Audited.
    #[oai(
        path = "/grants/:id/clawback",
        method = "post",
        operation_id = "clawbackGrant",
        tag = "Tag::Incentives"
    )]
    async fn clawback(
        &self,
        auth: OperatorAuth,
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<ClawbackRequest>,
    ) -> poem::Result<Reply<ClawbackResult>> {
        let grant_id = path_uuid("path:id", &id.0)?;
        let op = auth.0.clone();
        let reason = body.value.reason.clone();
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let r = grants::clawback(txn, &op, grant_id, &reason, Utc::now()).await?;
            Ok(Outcome::new(ClawbackResult {
                wallet_id: r.grant.wallet_id.to_string(),
                grant: grant_item(&r.grant),
                clawed_back_minor: r.clawed_back_minor,
                balance_after: r.balance_after.into(),
            }))
        })
        .await
    }
}
