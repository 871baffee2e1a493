//! Disputes of a wallet payment or a credited top-up, opened and resolved by the merchant's
//! back office (a key with the `corrections` permission).
//!
//! Opening moves no money: it records the claim (an amount up to what is still disputable)
//! and fires transaction.disputed. The resolution says who won. The merchant winning moves
//! nothing; the customer winning does, through the flow that already owns that money: a
//! payment is refunded by the disputed amount (the refund path, payment.refunded, its
//! rewards taken back in proportion), a top-up's credit is taken back from the wallet (a
//! chargeback: the customer is repaid outside the wallet, see `topup_reversals`). Both
//! transitions fire transaction.disputed in the transaction's own sequence and are audited
//! with the key that made them. One open dispute per transaction.
use chrono::{DateTime, Utc};
use entities::{dispute, payment::PaymentStatus};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::{
    credentials::Principal,
    credentials::scope::Acting,
    customers::wallets::Balance,
    operators,
    outbox::events::{NewOutbox, OutboxKind},
    payments::{self, ReversalKind},
    topups::TopupReversal,
    topups::topup_reversals::{self, CHARGEBACK},
    transactions::corrections::{none_open, same_merchant},
    transactions::read::Dispute,
    transactions::{self, Located},
};
use crate::{error::ApiError, store};

use entities::dispute::DisputeStatus;
/// The outcomes a resolution may name (the closed statuses).
pub const OUTCOMES: &[&str] = &["merchant_won", "customer_won"];

fn disputed_event(d: &dispute::Model, now: DateTime<Utc>) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: "transaction.disputed".into(),
        merchant_id: Some(d.merchant_id),
        resource_type: d.transaction_kind.clone(),
        resource_id: d.transaction_id.to_string(),
        payload: json!({
            "dispute_id": d.id.to_string(),
            "transaction_id": d.transaction_id.to_string(),
            "type": d.transaction_kind,
            "status": d.status.as_str(),
            "amount_minor": d.amount_minor,
            "currency": d.currency,
            "reason": d.reason,
            "recovered_minor": d.recovered_minor,
            "unrecovered_minor": d.unrecovered_minor,
            "movement_id": d.movement_id.map(|m| m.to_string()),
        }),
        occurred_at: now,
    }
}

async fn audit<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    action: &str,
    d: &dispute::Model,
    reason: Option<String>,
) -> Result<(), ApiError> {
    operators::audit(
        c,
        &p.actor(),
        action,
        "dispute",
        Some(d.id.to_string()),
        reason,
        json!({
            "merchant_id": d.merchant_id.to_string(),
            "transaction_id": d.transaction_id.to_string(),
            "type": d.transaction_kind,
            "status": d.status.as_str(),
            "amount_minor": d.amount_minor,
            "recovered_minor": d.recovered_minor,
            "unrecovered_minor": d.unrecovered_minor,
            "movement_id": d.movement_id.map(|m| m.to_string()),
            "currency": d.currency,
        }),
    )
    .await
}

#[derive(Clone, Debug)]
pub struct NewDispute {
    /// Default: all that is still disputable.
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub reason: String,
}

fn nothing_to_dispute(why: &str) -> ApiError {
    ApiError::field("path:transactionId", "nothing_to_dispute", why)
}

/// Opens a dispute of transaction `id` (moves no money).
pub async fn open<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    merchant: Uuid,
    integration_id: Uuid,
    id: Uuid,
    new: NewDispute,
    now: DateTime<Utc>,
) -> Result<Dispute, ApiError> {
    let located = transactions::locate(c, p, integration_id, id).await?;
    same_merchant(merchant, &located)?;
    // The transaction is locked first, as every movement of its money locks it.
    let (disputable, currency) = match &located {
        Located::Payment(pay) => {
            let pay = store::payments::lock(c, merchant, pay.id)
                .await?
                .ok_or_else(|| ApiError::not_found("Transaction"))?;
            if pay.status == PaymentStatus::Voided {
                return Err(nothing_to_dispute("the payment was voided"));
            }
            (pay.amount_minor - pay.refunded_minor, pay.currency)
        }
        Located::Topup(t) => {
            let (t, _) = topup_reversals::lock_topup(c, t).await?;
            if let Some(why) = topup_reversals::nothing_to_take(&t) {
                return Err(nothing_to_dispute(why));
            }
            // A top-up is disputed whole: a customer win takes its credit and bonus back
            // and ends it.
            if new
                .amount_minor
                .is_some_and(|a| a != t.credited_actual_minor)
            {
                return Err(ApiError::field(
                    "/amount_minor",
                    "whole_topup_only",
                    format!(
                        "a top-up is disputed whole: omit it or send {}",
                        t.credited_actual_minor
                    ),
                ));
            }
            (t.credited_actual_minor, t.currency)
        }
    };
    if disputable <= 0 {
        return Err(nothing_to_dispute("the payment was refunded in full"));
    }
    if new.currency.as_deref().is_some_and(|c| c != currency) {
        return Err(ApiError::field(
            "/currency",
            "currency_mismatch",
            format!("must be the transaction's currency, {currency}"),
        ));
    }
    let amount = new.amount_minor.unwrap_or(disputable);
    if !(1..=disputable).contains(&amount) {
        return Err(ApiError::field(
            "/amount_minor",
            "exceeds_disputable",
            format!("must be between 1 and the disputable amount, {disputable}"),
        ));
    }
    none_open(c, id).await?;
    let d = dispute::Model {
        id: Uuid::now_v7(),
        merchant_id: merchant,
        integration_id,
        transaction_id: id,
        transaction_kind: located.kind().into(),
        amount_minor: amount,
        currency,
        reason: new.reason.clone(),
        status: DisputeStatus::Open,
        recovered_minor: 0,
        unrecovered_minor: 0,
        movement_id: None,
        resolution_note: None,
        opened_by_key_id: p.key_id,
        resolved_by_key_id: None,
        created_at: now,
        resolved_at: None,
    };
    store::disputes::insert(c, d.clone()).await?;
    store::outbox::append_all(c, vec![disputed_event(&d, now)]).await?;
    audit(c, p, "dispute.open", &d, Some(new.reason)).await?;
    Ok(d.into())
}

#[derive(Clone, Debug)]
pub struct Resolved {
    pub dispute: Dispute,
    /// The refund a payment dispute the customer won made.
    pub refund: Option<payments::Refund>,
    /// The chargeback a top-up dispute the customer won made.
    pub reversal: Option<TopupReversal>,
    /// The wallet after the money moved (None when nothing moved).
    pub balance_after: Option<Balance>,
}

/// Which dispute of which transaction, resolved how.
pub struct Resolve<'a> {
    pub integration_id: Uuid,
    pub transaction_id: Uuid,
    pub dispute_id: Uuid,
    /// `merchant_won` or `customer_won`.
    pub outcome: &'a str,
    pub note: Option<String>,
}

/// Resolves dispute `dispute_id` of transaction `id`. Asking again for the outcome it has
/// answers it unchanged; another outcome is CONFLICT.
pub async fn resolve<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    acting: &Acting,
    asked: Resolve<'_>,
    now: DateTime<Utc>,
) -> Result<Resolved, ApiError> {
    let Resolve {
        integration_id,
        transaction_id: id,
        dispute_id,
        outcome,
        note,
    } = asked;
    let outcome = DisputeStatus::parse(outcome)
        .filter(|o| *o != DisputeStatus::Open)
        .ok_or_else(|| ApiError::field("/outcome", "invalid", "merchant_won or customer_won"))?;
    let merchant = acting.merchant_id;
    let located = transactions::locate(c, p, integration_id, id).await?;
    same_merchant(merchant, &located)?;
    // Lock order: the transaction's money (payment row or wallet), then the dispute.
    let topup = match &located {
        Located::Payment(pay) => {
            store::payments::lock(c, merchant, pay.id).await?;
            None
        }
        Located::Topup(t) => Some(topup_reversals::lock_topup(c, t).await?),
    };
    let d = store::disputes::lock(c, id, dispute_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Dispute"))?;
    if d.status != DisputeStatus::Open {
        if d.status == outcome {
            // Asked again: the money it moved then, not a second movement.
            let (refund, reversal) = match d.movement_id {
                None => (None, None),
                Some(m) => match &located {
                    Located::Payment(pay) => (
                        store::payments::refunds_of(c, pay.id)
                            .await?
                            .into_iter()
                            .find(|r| r.id == m)
                            .map(payments::Refund::from),
                        None,
                    ),
                    Located::Topup(t) => (
                        None,
                        store::disputes::reversal_of(c, t.id)
                            .await?
                            .map(TopupReversal::from),
                    ),
                },
            };
            return Ok(Resolved {
                dispute: d.into(),
                refund,
                reversal,
                balance_after: None,
            });
        }
        return Err(
            ApiError::conflict(format!("The dispute was already resolved: {}.", d.status))
                .with_details(json!({"status": d.status.as_str()})),
        );
    }
    let (mut refund, mut reversal, mut balance_after) = (None, None, None);
    let mut events = Vec::new();
    let mut d = dispute::Model {
        status: outcome,
        resolution_note: note.clone(),
        resolved_by_key_id: p.key_id,
        resolved_at: Some(now),
        ..d
    };
    if outcome == DisputeStatus::CustomerWon {
        match (&located, topup) {
            (Located::Payment(pay), _) => {
                let pay = store::payments::find(c, pay.id)
                    .await?
                    .ok_or_else(|| ApiError::not_found("Transaction"))?;
                let left = if pay.status == PaymentStatus::Voided {
                    0
                } else {
                    pay.amount_minor - pay.refunded_minor
                };
                let amount = d.amount_minor.min(left);
                if amount > 0 {
                    let back = payments::Reverse {
                        payment_id: pay.id,
                        kind: ReversalKind::Refund,
                        amount: Some(amount),
                        currency: None,
                        reason: Some(format!("dispute {}: {}", d.id, d.reason)),
                    };
                    let r = payments::reverse(c, p, acting, back).await?;
                    d.movement_id = r.refund.as_ref().map(|x| x.id);
                    refund = r.refund;
                    balance_after = Some(r.balance_after);
                }
                d.recovered_minor = amount;
                d.unrecovered_minor = d.amount_minor - amount;
            }
            (Located::Topup(_), Some((t, w))) => {
                if topup_reversals::nothing_to_take(&t).is_none() {
                    let (done, mut taken_events) = topup_reversals::take_back(
                        c,
                        t,
                        &w,
                        CHARGEBACK,
                        d.amount_minor,
                        Some(format!("dispute {}: {}", d.id, d.reason)),
                        now,
                    )
                    .await?;
                    events.append(&mut taken_events);
                    d.movement_id = Some(done.reversal.id);
                    d.recovered_minor = done.reversal.taken_back_minor;
                    d.unrecovered_minor = done.reversal.unrecovered_minor;
                    reversal = Some(done.reversal);
                    balance_after = Some(done.balance_after);
                } else {
                    d.unrecovered_minor = d.amount_minor;
                }
            }
            (Located::Topup(_), None) => {
                return Err(ApiError::internal("a top-up dispute without its top-up"));
            }
        }
    }
    store::disputes::update(c, d.clone()).await?;
    events.push(disputed_event(&d, now));
    store::outbox::append_all(c, events).await?;
    audit(c, p, "dispute.resolve", &d, note).await?;
    Ok(Resolved {
        dispute: d.into(),
        refund,
        reversal,
        balance_after,
    })
}
