//! Cashback: a program's rule turns part of what a payment took from actual money into a
//! RELEASED CASHBACK grant. It accrues in the payment's own transaction (so the payment
//! result reports it and a payment never exists without its cashback), and a refund or void
//! takes back the same share of it as the share of the payment returned.
//!
//! Only actual money earns cashback: promotional credit spent on a payment earns none. A
//! reversal takes back only what is left of the grant; the part the customer already spent
//! is recorded as unrecovered and never taken from actual money.
use chrono::{DateTime, Duration, Utc};
use entities::{cashback_accrual, cashback_rule, payment, promo_grant, wallet};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use super::{
    budgets::{self, Take},
    events::{NewOutbox, OutboxKind},
    ledger, wallets,
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

/// The cashback a payment earns under `rule`: basis points of the actual money it debited
/// (rounded down), capped; nothing below the rule's minimum payment.
pub fn earned(rule: &cashback_rule::Model, amount_minor: i64, debited_actual_minor: i64) -> i64 {
    if !rule.active || amount_minor < rule.min_payment_minor {
        return 0;
    }
    let raw = (i128::from(debited_actual_minor) * i128::from(rule.rate_bps) / 10_000) as i64;
    rule.max_cashback_minor.map_or(raw, |m| raw.min(m))
}

/// How much of `accrued` a payment of `amount` should have given back once `refunded` of
/// it was returned (rounded down, so the customer keeps any odd minor unit until the last
/// refund, which returns the rest).
pub fn share_to_reverse(accrued: i64, amount: i64, refunded: i64) -> i64 {
    if amount <= 0 || refunded >= amount {
        return accrued;
    }
    (i128::from(accrued) * i128::from(refunded) / i128::from(amount)) as i64
}

pub async fn configure<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Uuid,
    r: NewRule,
    now: DateTime<Utc>,
) -> Result<cashback_rule::Model, ApiError> {
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
    .await?)
}

pub async fn current<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    program_id: Uuid,
) -> Result<Option<cashback_rule::Model>, ApiError> {
    let program = wallets::program_for(c, merchant, Some(program_id)).await?;
    Ok(store::incentives::current_cashback_rule(c, program.id).await?)
}

/// The cashback grant a payment earned.
#[derive(Clone, Debug)]
pub struct Accrued {
    pub grant: promo_grant::Model,
    pub events: Vec<NewOutbox>,
}

/// Accrues the payment's cashback under the rule in force, inside the payment's
/// transaction (the wallet is locked). None when the program has no active rule or the
/// payment earns nothing (or the rule's budget is spent).
pub async fn accrue<C: ConnectionTrait>(
    c: &C,
    p: &payment::Model,
    w: &wallet::Model,
    now: DateTime<Utc>,
) -> Result<Option<Accrued>, ApiError> {
    let Some(rule) = store::incentives::current_cashback_rule(c, w.wallet_program_id).await? else {
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
    let mut g =
        store::wallets::insert_grant(c, w, amount, "CASHBACK", "RELEASED", expires_at, now).await?;
    store::ledger::post(
        c,
        &ledger::posting::grant_accrual(p.merchant_id, g.id, &w.currency, amount),
        store::ledger::Reference {
            kind: "cashback",
            id: p.id,
            memo: None,
        },
    )
    .await?;
    g.remaining_minor = amount;
    store::incentives::insert_cashback_accrual(
        c,
        cashback_accrual::Model {
            payment_id: p.id,
            merchant_id: p.merchant_id,
            grant_id: g.id,
            rule_id: rule.id,
            budget_id: rule.budget_id,
            amount_minor: amount,
            reversed_minor: 0,
            unrecovered_minor: 0,
            created_at: now,
            updated_at: now,
        },
    )
    .await?;
    let events = vec![super::topups::accrued_event(&g, w, p.id, now)];
    Ok(Some(Accrued { grant: g, events }))
}

/// What a refund or void took back of a payment's cashback.
#[derive(Clone, Debug, Default)]
pub struct Reversed {
    /// Taken from the cashback grant.
    pub reversed_minor: i64,
    /// Due back but already spent by the customer (never taken from actual money).
    pub unrecovered_minor: i64,
    pub events: Vec<NewOutbox>,
}

/// After a refund or void of `p` (its `refunded_minor` already includes it): takes back the
/// share of the payment's cashback that matches the share of the payment now returned. The
/// caller holds the payment and the wallet locked.
pub async fn reverse<C: ConnectionTrait>(
    c: &C,
    p: &payment::Model,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Reversed, ApiError> {
    let Some(mut acc) = store::incentives::find_cashback_accrual(c, p.id).await? else {
        return Ok(Reversed::default());
    };
    let refunded = if p.status == "voided" {
        p.amount_minor
    } else {
        p.refunded_minor
    };
    let due = share_to_reverse(acc.amount_minor, p.amount_minor, refunded)
        - acc.reversed_minor
        - acc.unrecovered_minor;
    if due <= 0 {
        return Ok(Reversed::default());
    }
    let g = store::wallets::find_grant(c, acc.grant_id)
        .await?
        .ok_or_else(|| ApiError::internal("cashback grant missing"))?;
    // An expired or clawed-back grant's remainder already went back to the merchant.
    let live = matches!(g.state.as_str(), "RELEASED" | "CONSUMED");
    let take = if live { due.min(g.remaining_minor) } else { 0 };
    let mut events = Vec::new();
    if take > 0 {
        store::ledger::post(
            c,
            &ledger::posting::cashback_reversal(p.merchant_id, g.id, &g.currency, take),
            store::ledger::Reference {
                kind: "cashback_reversal",
                id: p.id,
                memo: Some(reason.into()),
            },
        )
        .await?;
        let whole = acc.reversed_minor + take == acc.amount_minor;
        if whole {
            store::wallets::end_grant(c, g.id, "CLAWED_BACK", now).await?;
        }
        events.push(NewOutbox {
            kind: OutboxKind::Event,
            topic: "promo_grant.clawed_back".into(),
            merchant_id: Some(g.merchant_id),
            resource_type: "promo_grant".into(),
            resource_id: g.id.to_string(),
            payload: json!({
                "grant_id": g.id.to_string(),
                "wallet_id": g.wallet_id.to_string(),
                "source": g.source,
                "amount_minor": take,
                "currency": g.currency,
                "reason": reason,
                "payment_id": p.id.to_string(),
                "partial": !whole,
            }),
            occurred_at: now,
        });
        if let Some(b) = acc.budget_id {
            budgets::give_back(c, p.merchant_id, b, take, now).await?;
        }
    }
    acc.reversed_minor += take;
    acc.unrecovered_minor += due - take;
    acc.updated_at = now;
    store::incentives::update_cashback_accrual(c, acc).await?;
    Ok(Reversed {
        reversed_minor: take,
        unrecovered_minor: due - take,
        events,
    })
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

    #[test]
    fn a_refund_takes_back_the_same_share_and_the_last_refund_the_rest() {
        assert_eq!(share_to_reverse(200, 10_000, 2_500), 50);
        assert_eq!(share_to_reverse(101, 10_000, 5_000), 50);
        assert_eq!(share_to_reverse(101, 10_000, 10_000), 101);
        assert_eq!(share_to_reverse(7, 3, 1), 2);
    }
}
