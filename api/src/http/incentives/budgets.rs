//! Incentive budgets (`/incentives/budgets`): caps on what cashback, offers and reload
//! bonuses may give away.
use crate::http::pipeline::fields::CurrencyCode;
use crate::http::pipeline::fields::UuidText;
use crate::http::pipeline::fields::{AmountMinor, IntIn};
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi,
    param::{Path, Query},
};
use serde::{Deserialize, Serialize};

use crate::http::pipeline::fields::Text;

use crate::{
    domain::{
        credentials::Permission,
        incentives::budgets::{self, Change, NewBudget},
        validate::{self, Errors},
    },
    http::{
        customers::merchant_of,
        openapi::tags::Tag,
        pipeline::auth::ApiKeyAuth,
        pipeline::body::{JsonBody, Validate},
        pipeline::common::{RequestContext, RequestMeta, path_uuid, ts},
        pipeline::mutation::Idempotent,
        pipeline::reply::Reply,
    },
    idempotency::Outcome,
    state::AppState,
};

// --- budgets -----------------------------------------------------------------------------

/// Open a campaign budget.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct BudgetRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// 1 to 120 characters.
    #[serde(default)]
    pub name: Text<1, 120>,
    #[serde(default)]
    pub currency: CurrencyCode,
    /// The most promotional credit the campaign may issue, in minor units.
    #[serde(default)]
    pub limit_minor: AmountMinor,
}

impl Validate for BudgetRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.name.check(e, "/name");
        validate::currency(e, "/currency", &self.currency);
        self.limit_minor.check(e, "/limit_minor");
    }
}

/// Change a budget. Send the `version` you read as `expected_version`: when another change
/// landed in between, the answer is CONFLICT (409) and nothing changes.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct BudgetChangeRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// 1 to 120 characters.
    #[oai(nullable)]
    pub name: Option<Text<1, 120>>,
    /// Never below what the budget already spent.
    #[oai(nullable)]
    pub limit_minor: Option<IntIn<0, { validate::MAX_AMOUNT_MINOR }>>,
    /// False stops further accruals against it.
    #[oai(nullable)]
    pub active: Option<bool>,
    #[oai(nullable)]
    pub expected_version: Option<IntIn<1, { i32::MAX as i64 }>>,
}

impl Validate for BudgetChangeRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if let Some(n) = &self.name {
            n.check(e, "/name");
        }
        if let Some(l) = &self.limit_minor {
            l.check(e, "/limit_minor");
        }
        if let Some(v) = &self.expected_version {
            v.check(e, "/expected_version");
        }
    }
}

/// A campaign budget envelope.
#[derive(Object, Serialize)]
pub struct BudgetView {
    pub budget_id: String,
    pub name: String,
    pub currency: String,
    pub limit_minor: i64,
    /// Promotional credit its accruals issued (reversed cashback comes back).
    pub spent_minor: i64,
    pub remaining_minor: i64,
    pub active: bool,
    /// Changes with every update and accrual: the compare-and-swap token.
    pub version: i32,
    pub merchant_id: String,
    pub created_at: String,
    pub updated_at: String,
}

pub(super) fn budget_view(b: &budgets::Budget) -> BudgetView {
    BudgetView {
        budget_id: b.id.to_string(),
        name: b.name.clone(),
        currency: b.currency.clone(),
        limit_minor: b.limit_minor,
        spent_minor: b.spent_minor,
        remaining_minor: b.remaining_minor,
        active: b.active,
        version: b.version,
        merchant_id: b.merchant_id.to_string(),
        created_at: ts(b.created_at),
        updated_at: ts(b.updated_at),
    }
}

pub struct BudgetsApi;

#[OpenApi(tag = "Tag::Incentives")]
impl BudgetsApi {
    /// Open a campaign budget (beta)
    ///
    /// A cap on the promotional credit that the accruals pointing at it (offers, cashback
    /// rules, reload-bonus configs) issue in total. Accruals take from it with a
    /// compare-and-swap on its `version`, so concurrent accruals never overspend it: an
    /// offer's reward is taken whole or not at all; cashback and reload bonuses shrink to
    /// what is left.
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/incentives/budgets",
        method = "post",
        operation_id = "createBudget"
    )]
    async fn create_budget(
        &self,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<BudgetRequest>,
    ) -> poem::Result<Reply<BudgetView>> {
        auth.0.require(Permission::Incentives)?;
        let p = &auth.0;
        let b = &body.value;
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async move |txn, acting| {
            let r = budgets::create(
                txn,
                p.integration_id,
                acting.merchant_id,
                NewBudget {
                    name: b.name.to_string(),
                    currency: b.currency.to_string(),
                    limit_minor: *b.limit_minor,
                },
                clock.now(),
            )
            .await?;
            Ok(Outcome::new(budget_view(&r)))
        })
        .await
    }

    /// List campaign budgets (beta)
    ///
    /// In the order they were opened. Cursor-paginated (`limit` 1–200, default 50; pass
    /// `meta.next_cursor` as `cursor`).
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/incentives/budgets",
        method = "get",
        operation_id = "listBudgets"
    )]
    async fn list_budgets(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        merchant_id: Query<Option<UuidText>>,
        limit: Query<Option<crate::http::pipeline::fields::PageLimit>>,
        cursor: Query<Option<crate::http::pipeline::fields::Cursor>>,
    ) -> poem::Result<Reply<Vec<BudgetView>>> {
        auth.0.require(Permission::Incentives)?;
        let st = state.0;
        let mut e = Errors::default();
        let limit = crate::http::pipeline::fields::PageLimit::resolve(limit.0, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("budget", &cursor.0)?;
        let merchant = merchant_of(st, &auth.0, &merchant_id.0).await?;
        let (rows, more) = budgets::list(&st.db, merchant, after, limit).await?;
        let page = crate::http::pipeline::cursor::page("budget", &rows, more, |b| b.id);
        Ok(Reply::page(
            &rows.iter().map(budget_view).collect::<Vec<_>>(),
            &page,
        ))
    }

    /// Get a campaign budget (beta)
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/incentives/budgets/:budget_id",
        method = "get",
        operation_id = "getBudget"
    )]
    async fn get_budget(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        budget_id: Path<UuidText>,
        merchant_id: Query<Option<UuidText>>,
    ) -> poem::Result<Reply<BudgetView>> {
        auth.0.require(Permission::Incentives)?;
        let st = state.0;
        let id = path_uuid("path:budgetId", &budget_id.0)?;
        let merchant = merchant_of(st, &auth.0, &merchant_id.0).await?;
        Ok(Reply::ok(&budget_view(
            &budgets::show(&st.db, merchant, id).await?,
        )))
    }

    /// Change a campaign budget (beta)
    ///
    /// Renames, resizes (never below what was spent) or pauses a budget. With
    /// `expected_version`, the change applies only if the budget is still at that version
    /// (else CONFLICT, 409, with `details.current_version`; re-read and retry).
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/incentives/budgets/:budget_id",
        method = "patch",
        operation_id = "updateBudget"
    )]
    async fn update_budget(
        &self,
        auth: ApiKeyAuth,
        budget_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<BudgetChangeRequest>,
    ) -> poem::Result<Reply<BudgetView>> {
        auth.0.require(Permission::Incentives)?;
        let id = path_uuid("path:budgetId", &budget_id.0)?;
        let b = &body.value;
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async move |txn, acting| {
            let r = budgets::change(
                txn,
                acting.merchant_id,
                id,
                Change {
                    name: b.name.clone().map(String::from),
                    limit_minor: b.limit_minor.map(|l| l.0),
                    active: b.active,
                    expected_version: b.expected_version.map(|v| v.0 as i32),
                },
                clock.now(),
            )
            .await?;
            Ok(Outcome::new(budget_view(&r)))
        })
        .await
    }
}
