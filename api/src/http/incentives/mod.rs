//! Incentives: the cashback rule per program, campaign budgets (beta) and offers (beta).
pub mod grants;
use crate::http::pipeline::fields::CurrencyCode;
use crate::http::pipeline::fields::{AmountMinor, IntIn};
mod budgets;
mod offers;
mod reload_bonus;
mod reward;

pub use budgets::*;
pub use offers::*;
pub use reload_bonus::*;
pub use reward::*;

use crate::http::pipeline::fields::UuidText;
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Query};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::{
    customers::merchant_of,
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, optional_uuid, path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        incentives::cashback::{self, NewRule, Rule},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

// --- cashback ----------------------------------------------------------------------------

/// Set a program's cashback rule (a new version; earlier payments keep theirs).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CashbackRuleRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    #[serde(default)]
    pub wallet_program_id: UuidText,
    /// Exactly 3 letters: the program's currency.
    #[serde(default)]
    pub currency: CurrencyCode,
    /// Basis points of the actual money a payment debits (100 = 1 %), 1 to 10000.
    #[serde(default)]
    pub rate_bps: IntIn<1, 10_000>,
    /// Payments below this amount earn nothing (default 1).
    #[oai(nullable)]
    pub min_payment_minor: Option<AmountMinor>,
    /// Cap per payment.
    #[oai(nullable)]
    pub max_cashback_minor: Option<AmountMinor>,
    /// Lifetime of a cashback grant in days, 1 to 3650 (default 365).
    #[oai(nullable)]
    pub expiry_days: Option<IntIn<1, 3650>>,
    /// False pauses the rule (default true).
    #[oai(nullable)]
    pub active: Option<bool>,
    /// A campaign budget capping the cashback issued in total (beta).
    #[oai(nullable)]
    pub budget_id: Option<UuidText>,
}

impl Validate for CashbackRuleRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        validate::uuid(e, "/wallet_program_id", &self.wallet_program_id);
        validate::currency(e, "/currency", &self.currency);
        self.rate_bps.check(e, "/rate_bps");
        if let Some(m) = &self.min_payment_minor {
            m.check(e, "/min_payment_minor");
        }
        if let Some(m) = &self.max_cashback_minor {
            m.check(e, "/max_cashback_minor");
        }
        if let Some(d) = &self.expiry_days {
            d.check(e, "/expiry_days");
        }
        optional_uuid(e, "/budget_id", &self.budget_id);
    }
}

/// A program's cashback rule as stored.
#[derive(Object, Serialize)]
pub struct CashbackRuleView {
    pub rule_id: String,
    pub wallet_program_id: String,
    /// Counts changes.
    pub version: i32,
    pub currency: String,
    pub rate_bps: i32,
    pub min_payment_minor: i64,
    #[oai(nullable)]
    pub max_cashback_minor: Option<i64>,
    pub expiry_days: i32,
    pub active: bool,
    #[oai(nullable)]
    pub budget_id: Option<String>,
    pub merchant_id: String,
    /// When this version came into force.
    pub created_at: String,
}

fn rule_view(r: &Rule) -> CashbackRuleView {
    CashbackRuleView {
        rule_id: r.id.to_string(),
        wallet_program_id: r.wallet_program_id.to_string(),
        version: r.version,
        currency: r.currency.clone(),
        rate_bps: r.rate_bps,
        min_payment_minor: r.min_payment_minor,
        max_cashback_minor: r.max_cashback_minor,
        expiry_days: r.expiry_days,
        active: r.active,
        budget_id: r.budget_id.map(|b| b.to_string()),
        merchant_id: r.merchant_id.to_string(),
        created_at: ts(r.created_at),
    }
}

/// A body with nothing but the request envelope (`meta`, `context`).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct EnvelopeOnly {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
}

impl Validate for EnvelopeOnly {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
    }
}

/// The program (required) and budget (optional) an incentive rule names: VALIDATION_ERROR
/// naming each field that is not a UUID.
fn program_and_budget<S: AsRef<str>>(
    program: &str,
    budget: &Option<S>,
) -> Result<(uuid::Uuid, Option<uuid::Uuid>), ApiError> {
    let mut e = Errors::default();
    let p = validate::uuid(&mut e, "/wallet_program_id", program);
    let b = optional_uuid(&mut e, "/budget_id", budget);
    e.finish()?;
    Ok((p.ok_or_else(|| ApiError::internal("validated program"))?, b))
}

pub struct IncentivesApi;

#[OpenApi(tag = "Tag::Incentives")]
impl IncentivesApi {
    /// Set the cashback rule
    ///
    /// Stores a new version of the program's cashback rule. Every completed payment then
    /// earns `rate_bps` of the actual money it debited (promotional credit earns none),
    /// capped by `max_cashback_minor`, as a RELEASED CASHBACK grant accrued in the
    /// payment's own transaction and reported in the payment result. A refund takes back
    /// the same share of the cashback as the share of the payment it returns, a void all of
    /// it; what the customer already spent is reported as unrecovered, never taken from
    /// actual money. Later changes never touch earlier payments.
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/incentives/cashback/config",
        method = "post",
        operation_id = "setCashbackRule"
    )]
    async fn set_cashback(
        &self,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<CashbackRuleRequest>,
    ) -> poem::Result<Reply<CashbackRuleView>> {
        auth.0.require(Permission::Incentives)?;
        let p = &auth.0;
        let b = &body.value;
        let (program, budget) = program_and_budget(&b.wallet_program_id, &b.budget_id)?;
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async move |txn, acting| {
            let r = cashback::configure(
                txn,
                p.integration_id,
                acting.merchant_id,
                NewRule {
                    wallet_program_id: program,
                    currency: b.currency.to_string(),
                    // Checked: 1 to 10,000.
                    rate_bps: b.rate_bps.0 as i32,
                    min_payment_minor: b.min_payment_minor.map_or(1, |m| m.0),
                    max_cashback_minor: b.max_cashback_minor.map(|m| m.0),
                    expiry_days: b
                        .expiry_days
                        .map_or(cashback::DEFAULT_EXPIRY_DAYS, |d| d.0 as i32),
                    active: b.active.unwrap_or(true),
                    budget_id: budget,
                },
                clock.now(),
            )
            .await?;
            Ok(Outcome::new(rule_view(&r)))
        })
        .await
    }

    /// Get the cashback rule
    ///
    /// The rule in force for the program (NOT_FOUND when none was set).
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/incentives/cashback/config",
        method = "get",
        operation_id = "getCashbackRule"
    )]
    async fn get_cashback(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        wallet_program_id: Query<crate::http::pipeline::fields::UuidText>,
        merchant_id: Query<Option<UuidText>>,
    ) -> poem::Result<Reply<CashbackRuleView>> {
        auth.0.require(Permission::Incentives)?;
        let st = state.0;
        let program = path_uuid("query:wallet_program_id", &wallet_program_id.0)?;
        let merchant = merchant_of(st, &auth.0, &merchant_id.0).await?;
        let r = cashback::current(&st.db, merchant, program)
            .await?
            .ok_or_else(|| ApiError::not_found("Cashback rule"))?;
        Ok(Reply::ok(&rule_view(&r)))
    }
}
