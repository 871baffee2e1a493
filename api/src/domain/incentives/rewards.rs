//! Rewards a payment earned (its cashback, an offer redeemed against it) and their
//! reversal. A refund takes back the same share of each reward as the share of the
//! reward's base it returns, a void (or the last refund) all of it; the reward's grant then
//! ends CLAWED_BACK, so promotional credit that later comes back to it is forfeited to the
//! merchant instead of reviving it.
//!
//! Only what is left of the grant is taken back. The part the customer already spent is
//! recorded as unrecovered and never taken from actual money; if that spent credit comes
//! back to the grant (a refund of the payment it was spent on), it is taken then.
use chrono::{DateTime, Utc};
use entities::{
    payment, payment::PaymentStatus, payment_reward, promo_grant, promo_grant::PromoGrantState,
};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::{
    incentives::budgets,
    ledger,
    outbox::events::{NewOutbox, OutboxKind},
};
use crate::{error::ApiError, store};

pub const CASHBACK: &str = "cashback";
pub const OFFER: &str = "offer";

/// Records a reward just accrued into `grant` for payment `p` (base: what the payment
/// holds now).
pub async fn record<C: ConnectionTrait>(
    c: &C,
    p: &payment::Model,
    kind: &str,
    source_id: Uuid,
    grant: &promo_grant::Model,
    budget_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    Ok(store::incentives::insert_reward(
        c,
        payment_reward::Model {
            id: Uuid::now_v7(),
            payment_id: p.id,
            kind: kind.into(),
            source_id,
            merchant_id: p.merchant_id,
            grant_id: grant.id,
            budget_id,
            amount_minor: grant.original_minor,
            base_minor: p.amount_minor,
            base_refunded_minor: p.refunded_minor,
            reversed_minor: 0,
            unrecovered_minor: 0,
            created_at: now,
            updated_at: now,
        },
    )
    .await?)
}

/// How much of a reward of `amount` earned on `base` (of which `base_refunded` was already
/// refunded when it accrued) is due back once `refunded` of the payment was returned:
/// rounded down, so the customer keeps any odd minor unit until all of it is returned.
pub fn due_back(amount: i64, base: i64, base_refunded: i64, refunded: i64) -> i64 {
    let held = base - base_refunded;
    let returned = refunded - base_refunded;
    if held <= 0 || returned >= held {
        return amount;
    }
    if returned <= 0 {
        return 0;
    }
    // returned < held, so the share is below `amount`: it always fits.
    i64::try_from(i128::from(amount) * i128::from(returned) / i128::from(held)).unwrap_or(amount)
}

/// What a refund or void took back of a payment's rewards.
#[derive(Clone, Debug, Default)]
pub struct Reversed {
    /// Taken from the rewards' grants, by kind.
    pub cashback_minor: i64,
    pub offer_minor: i64,
    /// Due back but already spent by the customer (never taken from actual money).
    pub unrecovered_minor: i64,
    pub events: Vec<NewOutbox>,
}

fn clawed_back_event(
    g: &promo_grant::Model,
    amount: i64,
    reason: &str,
    payment_id: Uuid,
    whole: bool,
    now: DateTime<Utc>,
) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: "promo_grant.clawed_back".into(),
        merchant_id: Some(g.merchant_id),
        resource_type: "promo_grant".into(),
        resource_id: g.id.to_string(),
        payload: json!({
            "grant_id": g.id.to_string(),
            "wallet_id": g.wallet_id.to_string(),
            "source": g.source,
            "amount_minor": amount,
            "currency": g.currency,
            "reason": reason,
            "payment_id": payment_id.to_string(),
            "partial": !whole,
        }),
        occurred_at: now,
    }
}

/// Takes up to `due` out of the reward's grant (what is left of it) and returns the amount
/// taken. With `whole` the grant ends CLAWED_BACK.
async fn take_back<C: ConnectionTrait>(
    c: &C,
    r: &payment_reward::Model,
    due: i64,
    whole: bool,
    reason: &str,
    now: DateTime<Utc>,
    events: &mut Vec<NewOutbox>,
) -> Result<i64, ApiError> {
    let g = store::customers::wallets::find_grant(c, r.grant_id)
        .await?
        .ok_or_else(|| ApiError::internal("reward grant missing"))?;
    // An expired or clawed-back grant's remainder already went back to the merchant.
    let live = matches!(
        g.state,
        PromoGrantState::Released | PromoGrantState::Consumed
    );
    // Ending the reward takes all that is left of its grant (credit refunded into it
    // included); otherwise at most what is due.
    let take = match (live, whole) {
        (false, _) => 0,
        (true, true) => g.remaining_minor,
        (true, false) => due.min(g.remaining_minor),
    };
    if take > 0 {
        store::ledger::post(
            c,
            &ledger::posting::reward_reversal(r.merchant_id, (&g).into(), &g.currency, take),
            store::ledger::Reference {
                kind: "reward_reversal",
                id: r.payment_id,
                memo: Some(reason.into()),
                at: now,
            },
        )
        .await?;
        if let Some(b) = r.budget_id {
            budgets::give_back(c, r.merchant_id, b, take, now).await?;
        }
    }
    if live && whole {
        store::customers::wallets::end_grant(c, g.id, PromoGrantState::ClawedBack, now).await?;
    }
    if take > 0 || (live && whole) {
        events.push(clawed_back_event(
            &g,
            take,
            reason,
            r.payment_id,
            whole,
            now,
        ));
    }
    Ok(take)
}

/// After a refund or void of `p` (its `refunded_minor` and status already updated): takes
/// back each reward's due share. The caller holds the payment and the wallet locked.
pub async fn reverse<C: ConnectionTrait>(
    c: &C,
    p: &payment::Model,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Reversed, ApiError> {
    let mut out = Reversed::default();
    let refunded = if p.status == PaymentStatus::Voided {
        p.amount_minor
    } else {
        p.refunded_minor
    };
    for mut r in store::incentives::rewards_of_payment(c, p.id).await? {
        let target = due_back(
            r.amount_minor,
            r.base_minor,
            r.base_refunded_minor,
            refunded,
        );
        let due = target - r.reversed_minor - r.unrecovered_minor;
        if due <= 0 {
            continue;
        }
        let whole = target == r.amount_minor;
        let take = take_back(c, &r, due, whole, reason, now, &mut out.events).await?;
        match r.kind.as_str() {
            CASHBACK => out.cashback_minor += take,
            _ => out.offer_minor += take,
        }
        out.unrecovered_minor += (due - take).max(0);
        r.reversed_minor += take;
        r.unrecovered_minor = (target - r.reversed_minor).max(0);
        r.updated_at = now;
        store::incentives::update_reward(c, r).await?;
    }
    Ok(out)
}

/// After a refund put promotional credit back into `grants`: a reward grant that owes an
/// unrecovered reversal gives it up now. The caller holds the wallet locked.
pub async fn recover(
    c: &impl ConnectionTrait,
    grants: &[Uuid],
    now: DateTime<Utc>,
) -> Result<Vec<NewOutbox>, ApiError> {
    let mut events = Vec::new();
    for g in grants {
        for mut r in store::incentives::rewards_owing_on_grant(c, *g).await? {
            let take = take_back(
                c,
                &r,
                r.unrecovered_minor,
                false,
                "unrecovered_reward",
                now,
                &mut events,
            )
            .await?;
            if take > 0 {
                r.reversed_minor += take;
                r.unrecovered_minor -= take;
                r.updated_at = now;
                store::incentives::update_reward(c, r).await?;
            }
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refund_takes_back_the_same_share_of_the_reward_and_the_last_refund_the_rest() {
        assert_eq!(due_back(200, 10_000, 0, 2_500), 50);
        assert_eq!(due_back(101, 10_000, 0, 5_000), 50);
        assert_eq!(due_back(101, 10_000, 0, 10_000), 101);
        assert_eq!(due_back(7, 3, 0, 1), 2);
    }

    #[test]
    fn a_reward_earned_after_a_refund_is_measured_against_what_the_payment_held_then() {
        // Earned on 8000 of a 10000 payment (2000 refunded before).
        assert_eq!(due_back(800, 10_000, 2_000, 2_000), 0);
        assert_eq!(due_back(800, 10_000, 2_000, 6_000), 400);
        assert_eq!(due_back(800, 10_000, 2_000, 10_000), 800);
    }
}
