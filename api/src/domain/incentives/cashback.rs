//! Cashback: a program's rule turns part of what a payment took from actual money into a
//! RELEASED CASHBACK grant. It accrues in the payment's own transaction (so the payment
//! result reports it and a payment never exists without its cashback) and is recorded as
//! the payment's reward, which a refund or void takes back in proportion (see `rewards`).
//!
//! Only actual money earns cashback: promotional credit spent on a payment earns none.
use chrono::{DateTime, Duration, Utc};
use entities::{cashback_rule, payment, promo_grant, wallet};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::{
    customers::wallets,
    incentives::budgets::{self, Take},
    incentives::rewards,
    ledger::{self, money},
    outbox::events::NewOutbox,
};
use crate::{error::ApiError, store};

pub const DEFAULT_EXPIRY_DAYS: i32 = 365;

#[derive(Clone, Debug)]
pub struct NewRule {
    pub wallet_program_id: Uuid,
    pub currency: String,
    pub rate_bps: i32,
    pub min_payment_minor: i64,
    pub max_cashback_minor: Option<i64>,
    pub expiry_days: i32,
    pub active: bool,
    pub budget_id: Option<Uuid>,
}

/// A version of a program's cashback rule: the domain's read model, so the HTTP edge names
/// no table.
#[derive(Clone, Debug)]
pub struct Rule {
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub wallet_program_id: Uuid,
    /// Counts changes.
    pub version: i32,
    pub currency: String,
    /// Basis points of the actual money a payment debits.
    pub rate_bps: i32,
    /// Payments below it earn nothing.
    pub min_payment_minor: i64,
    /// Cap per payment.
    pub max_cashback_minor: Option<i64>,
    /// Lifetime of a cashback grant in days.
    pub expiry_days: i32,
    pub active: bool,
    pub budget_id: Option<Uuid>,
    /// When this version came into force.
    pub created_at: DateTime<Utc>,
}

impl From<cashback_rule::Model> for Rule {
    fn from(r: cashback_rule::Model) -> Self {
        Rule {
            id: r.id,
            merchant_id: r.merchant_id,
            wallet_program_id: r.wallet_program_id,
            version: r.version,
            currency: r.currency,
            rate_bps: r.rate_bps,
            min_payment_minor: r.min_payment_minor,
            max_cashback_minor: r.max_cashback_minor,
            expiry_days: r.expiry_days,
            active: r.active,
            budget_id: r.budget_id,
            created_at: r.created_at,
        }
    }
}

/// The cashback a payment earns under `rule`: basis points of the actual money it debited
/// (rounded down), capped; nothing below the rule's minimum payment.
pub fn earned(rule: &cashback_rule::Model, amount_minor: i64, debited_actual_minor: i64) -> i64 {
    if !rule.active || amount_minor < rule.min_payment_minor {
        return 0;
    }
    // The rate is at most 100 %, so the share is bounded whenever the debit is; a share
    // that is not (a rule written before the bound) earns nothing rather than wrapping.
    let raw = money::basis_points(debited_actual_minor, rule.rate_bps).unwrap_or(0);
    rule.max_cashback_minor.map_or(raw, |m| raw.min(m))
}

pub async fn configure<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Uuid,
    r: NewRule,
    now: DateTime<Utc>,
) -> Result<Rule, ApiError> {
    let program = wallets::program_for(c, merchant, Some(r.wallet_program_id)).await?;
    if program.currency != r.currency {
        return Err(ApiError::currency_not_supported(std::slice::from_ref(
            &program.currency,
        )));
    }
    if let Some(b) = r.budget_id {
        let budget = budgets::get(c, merchant, b).await?;
        if budget.currency != r.currency {
            return Err(ApiError::field(
                "/budget_id",
                "currency_mismatch",
                format!("is a budget in {}", budget.currency),
            ));
        }
    }
    store::tenancy::lock_program(c, program.id).await?;
    let version = store::incentives::current_cashback_rule(c, program.id)
        .await?
        .map_or(1, |v| v.version + 1);
    Ok(store::incentives::insert_cashback_rule(
        c,
        cashback_rule::Model {
            id: Uuid::now_v7(),
            merchant_id: merchant,
            integration_id,
            wallet_program_id: program.id,
            version,
            currency: r.currency,
            rate_bps: r.rate_bps,
            min_payment_minor: r.min_payment_minor,
            max_cashback_minor: r.max_cashback_minor,
            expiry_days: r.expiry_days,
            active: r.active,
            budget_id: r.budget_id,
            created_at: now,
        },
    )
    .await?
    .into())
}

pub async fn current<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    program_id: Uuid,
) -> Result<Option<Rule>, ApiError> {
    let program = wallets::program_for(c, merchant, Some(program_id)).await?;
    Ok(store::incentives::current_cashback_rule(c, program.id)
        .await?
        .map(Rule::from))
}

/// The cashback grant a payment earned.
#[derive(Clone, Debug)]
pub struct Accrued {
    pub grant: promo_grant::Model,
    pub events: Vec<NewOutbox>,
}

/// Accrues the payment's cashback under `rule`, the rule in force for the wallet's program
/// (read earlier in the payment's transaction), inside that transaction (the wallet is
/// locked). None when there is no rule or the payment earns nothing (or the rule's budget
/// is spent).
pub async fn accrue<C: ConnectionTrait>(
    c: &C,
    rule: Option<cashback_rule::Model>,
    p: &payment::Model,
    w: &wallet::Model,
    now: DateTime<Utc>,
) -> Result<Option<Accrued>, ApiError> {
    let Some(rule) = rule else {
        return Ok(None);
    };
    let want = earned(&rule, p.amount_minor, p.debited_actual_minor);
    let amount = match rule.budget_id {
        Some(b) => budgets::spend(c, p.merchant_id, b, want, Take::UpTo, now).await?,
        None => want,
    };
    if amount <= 0 {
        return Ok(None);
    }
    let expires_at = now + Duration::days(i64::from(rule.expiry_days));
    let released = entities::promo_grant::PromoGrantState::Released;
    let mut g = store::customers::wallets::insert_grant(
        c, w, amount, "CASHBACK", released, expires_at, now,
    )
    .await?;
    store::ledger::post(
        c,
        &ledger::posting::grant_accrual(p.merchant_id, (&g).into(), &w.currency, amount),
        store::ledger::Reference {
            kind: "cashback",
            id: p.id,
            memo: None,
            at: now,
        },
    )
    .await?;
    g.remaining_minor = amount;
    rewards::record(c, p, rewards::CASHBACK, rule.id, &g, rule.budget_id, now).await?;
    let events = vec![crate::domain::incentives::grant_events::accrued_event(
        &g, w, p.id, now,
    )];
    Ok(Some(Accrued { grant: g, events }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(bps: i32, min: i64, max: Option<i64>) -> cashback_rule::Model {
        cashback_rule::Model {
            id: Uuid::nil(),
            merchant_id: Uuid::nil(),
            integration_id: Uuid::nil(),
            wallet_program_id: Uuid::nil(),
            version: 1,
            currency: "EUR".into(),
            rate_bps: bps,
            min_payment_minor: min,
            max_cashback_minor: max,
            expiry_days: 30,
            active: true,
            budget_id: None,
            created_at: Utc::now(),
        }
    }

    #[test]
    fn cashback_is_basis_points_of_the_actual_money_debited_capped_and_from_a_minimum() {
        assert_eq!(earned(&rule(200, 1, None), 10_000, 10_000), 200);
        assert_eq!(
            earned(&rule(200, 1, None), 10_000, 4_000),
            80,
            "promo earns none"
        );
        assert_eq!(earned(&rule(200, 1, Some(50)), 10_000, 10_000), 50);
        assert_eq!(earned(&rule(200, 5_000, None), 4_999, 4_999), 0);
        assert_eq!(earned(&rule(333, 1, None), 100, 100), 3, "rounded down");
    }

    proptest::proptest! {
        /// Cashback never exceeds what the payment took from actual money, nor the bound.
        #[test]
        fn cashback_is_at_most_the_actual_money_debited(
            debited in 0..=money::MAX_AMOUNT_MINOR,
            bps in 1..=10_000i32,
            cap in proptest::option::of(0..=money::MAX_AMOUNT_MINOR),
        ) {
            let c = earned(&rule(bps, 1, cap), debited.max(1), debited);
            proptest::prop_assert!(c >= 0 && c <= debited && c <= money::MAX_AMOUNT_MINOR);
        }
    }
}
