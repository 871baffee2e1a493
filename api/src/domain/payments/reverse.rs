//! Void and refund: the payment is locked, then the wallet, and what earlier refunds
//! returned decides what this one may (actual money first, then each grant's part while
//! the grant is usable, the rest forfeited); rewards are taken back in proportion.
use entities::{payment::PaymentStatus, payment_refund};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::payments::{
    Payment, Refund, payment_event, split_from_json, split_json, visible,
};

use crate::{
    domain::{
        credentials::Principal,
        credentials::scope::Acting,
        customers::wallets::{self, Balance},
        incentives::rewards,
        ledger::{self, DebitPlan, PostingKind, RefundPlan},
    },
    error::ApiError,
    store,
};

#[derive(Clone, Debug)]
pub struct Reversal {
    pub payment: Payment,
    /// What the reversal took back of the payment's rewards (cashback, an offer's).
    pub rewards: rewards::Reversed,
    /// None when a void found the payment already voided (a no-op).
    pub refund: Option<Refund>,
    pub balance_after: Balance,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReversalKind {
    Void,
    Refund,
}

/// What a void or refund asks of which payment.
#[derive(Clone, Debug)]
pub struct Reverse {
    pub payment_id: Uuid,
    pub kind: ReversalKind,
    /// A refund's amount; None for a void, or a refund of all that is left.
    pub amount: Option<i64>,
    /// The currency the caller states, which must be the payment's.
    pub currency: Option<String>,
    pub reason: Option<String>,
}

/// Void (the whole payment, only before any refund) or refund (`amount`, default all that
/// is left). Never returns more than was paid across all refunds: the payment row is locked,
/// so concurrent refunds queue and each sees what the others returned. Promotional parts go
/// back to their grant while it can still hold credit, else to the merchant's forfeit
/// account.
pub async fn reverse<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    acting: &Acting,
    asked: Reverse,
) -> Result<Reversal, ApiError> {
    let Reverse {
        payment_id,
        kind,
        amount,
        currency,
        reason,
    } = asked;
    let now = acting.now();
    let merchant = acting.merchant_id;
    let p = store::payments::lock(c, merchant, payment_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Payment"))?;
    if !visible(c, principal, &p).await? {
        return Err(ApiError::not_found("Payment"));
    }
    if currency.as_deref().is_some_and(|cur| cur != p.currency) {
        return Err(ApiError::field(
            "/currency",
            "currency_mismatch",
            format!("must be the payment's currency, {}", p.currency),
        ));
    }
    let w = store::customers::wallets::lock_wallet(c, merchant, p.wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    if p.status == PaymentStatus::Voided {
        if kind == ReversalKind::Void {
            let balance_after = wallets::current_balance(c, &w, now).await?;
            return Ok(Reversal {
                payment: p.into(),
                rewards: rewards::Reversed::default(),
                refund: None,
                balance_after,
            });
        }
        return Err(ApiError::conflict(
            "The payment was voided; nothing is left to refund.",
        ));
    }
    let earlier = store::payments::refunds_of(c, p.id).await?;
    if kind == ReversalKind::Void && !earlier.is_empty() {
        return Err(ApiError::field(
            "/",
            "partially_refunded",
            "the payment was partly refunded; refund the remainder instead of voiding it",
        ));
    }
    let paid = DebitPlan {
        from_grants: split_from_json(&p.promo_split),
        from_actual: p.debited_actual_minor,
    };
    let mut returned = DebitPlan::default();
    for r in &earlier {
        returned.from_actual += r.to_actual_minor;
        returned.from_grants.extend(split_from_json(&r.to_grants));
    }
    let left = p.amount_minor - p.refunded_minor;
    let amount = amount.unwrap_or(left);
    let grant_ids: Vec<Uuid> = paid.from_grants.iter().map(|(g, _)| *g).collect();
    let grants = store::customers::wallets::grants_by_ids(c, &grant_ids).await?;
    let views: Vec<_> = grants.iter().map(wallets::grant_view).collect();
    let plan: RefundPlan =
        ledger::plan_refund(&paid, &returned, &views, amount, now).ok_or_else(|| {
            ApiError::field(
                "/amount_minor",
                "exceeds_refundable",
                format!("must be between 1 and the refundable amount, {left}"),
            )
        })?;
    // What the refund returns to the wallet (a part whose grant ended is forfeited, not
    // returned); the reward it takes back is left out, so the check errs on the safe side.
    let back = plan.to_actual.saturating_add(plan.promo_returned());
    wallets::ensure_room(c, &w, back, "/amount_minor").await?;
    let posting_kind = match kind {
        ReversalKind::Void => PostingKind::Void,
        ReversalKind::Refund => PostingKind::Refund,
    };
    let refund_id = Uuid::now_v7();
    let posting = ledger::posting::refund(posting_kind, merchant, w.id, &w.currency, &plan);
    let posting_id = store::ledger::post(
        c,
        &posting,
        store::ledger::Reference {
            kind: posting_kind.as_str(),
            id: refund_id,
            memo: reason.clone(),
            at: now,
        },
    )
    .await?;
    let refund = payment_refund::Model {
        id: refund_id,
        payment_id: p.id,
        integration_id: p.integration_id,
        merchant_id: merchant,
        kind: posting_kind.as_str().into(),
        amount_minor: amount,
        to_actual_minor: plan.to_actual,
        to_grants: split_json(&plan.as_returned().from_grants),
        forfeited_promo_minor: plan.forfeited_promo(),
        reason,
        posting_id,
        created_at: now,
    };
    store::payments::insert_refund(c, refund.clone()).await?;
    let voided_at = (kind == ReversalKind::Void).then_some(now);
    store::payments::set_refunded(c, p.id, p.refunded_minor + amount, voided_at, now).await?;
    let mut p = p;
    p.refunded_minor += amount;
    if let Some(at) = voided_at {
        p.status = PaymentStatus::Voided;
        p.voided_at = Some(at);
    }
    p.updated_at = now;
    let mut reversed = rewards::reverse(
        c,
        &p,
        match kind {
            ReversalKind::Void => "payment_voided",
            ReversalKind::Refund => "payment_refunded",
        },
        now,
    )
    .await?;
    let refilled: Vec<Uuid> = plan.to_grants.iter().map(|(g, _)| *g).collect();
    reversed
        .events
        .extend(rewards::recover(c, &refilled, now).await?);
    let w = store::customers::wallets::find_wallet(c, merchant, w.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let balance_after = wallets::current_balance(c, &w, now).await?;
    let (topic, cause) = match kind {
        ReversalKind::Void => ("payment.reversed", "void"),
        ReversalKind::Refund => ("payment.refunded", "refund"),
    };
    let mut events = vec![payment_event(
        topic,
        &p,
        json!({
            "refund_id": refund_id.to_string(),
            "returned_minor": amount,
            "returned_actual_minor": plan.to_actual,
            "returned_promo_minor": plan.promo_returned(),
            "forfeited_promo_minor": plan.forfeited_promo(),
            "cashback_reversed_minor": reversed.cashback_minor,
            "offer_reward_reversed_minor": reversed.offer_minor,
            "rewards_unrecovered_minor": reversed.unrecovered_minor,
        }),
        now,
    )];
    events.append(&mut reversed.events);
    events.push(wallets::balance_changed(
        &w,
        &balance_after,
        cause,
        refund_id,
        now,
    ));
    store::outbox::append_all(c, events).await?;
    Ok(Reversal {
        payment: p.into(),
        rewards: reversed,
        refund: Some(refund.into()),
        balance_after,
    })
}
