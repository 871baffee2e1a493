//! What partners read of a payment and its refunds: the domain's read models, so the HTTP
//! edge names no table. Derived values (what is still refundable, the feed's status, the
//! grants that paid) are worked out here, once. It names nothing else of `payments`, so
//! the feed, lookups and disputes may read payments without a circle.
use chrono::{DateTime, Utc};
use entities::{payment, payment_refund};
use uuid::Uuid;

/// What may still happen to a payment: a void while nothing of it was refunded, refunds
/// while it is completed, up to what was not refunded yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reversibility {
    pub voidable: bool,
    pub refundable: bool,
    pub refundable_minor: i64,
}

pub fn reversibility(p: &payment::Model) -> Reversibility {
    let completed = p.status == payment::PaymentStatus::Completed;
    Reversibility {
        voidable: completed && p.refunded_minor == 0,
        refundable: completed,
        refundable_minor: if completed {
            p.amount_minor - p.refunded_minor
        } else {
            0
        },
    }
}

/// A payment's status as the feed reports it.
fn feed_status(p: &payment::Model) -> &'static str {
    match (p.status, p.refunded_minor) {
        (payment::PaymentStatus::Voided, _) => "voided",
        (_, 0) => "completed",
        (_, r) if r >= p.amount_minor => "refunded",
        _ => "partially_refunded",
    }
}

/// A wallet payment as partners read it.
#[derive(Clone, Debug)]
pub struct Payment {
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub branch_id: Option<Uuid>,
    pub terminal_id: Option<String>,
    pub cashier_id: Option<String>,
    pub wallet_id: Uuid,
    pub status: payment::PaymentStatus,
    /// The feed's status: completed, partially_refunded, refunded or voided.
    pub feed_status: &'static str,
    pub credential_type: String,
    pub amount_minor: i64,
    pub currency: String,
    pub debited_promo_minor: i64,
    pub debited_actual_minor: i64,
    /// The grants that paid, as stored: read through `promo_split`, which only the
    /// transaction detail needs (a payment's own answer does not parse it).
    split: serde_json::Value,
    pub refunded_minor: i64,
    /// What may still happen to it: a void, refunds, and how much is left to refund.
    pub can: Reversibility,
    pub order_ref: Option<String>,
    /// The basket as the terminal sent it.
    pub basket: Option<serde_json::Value>,
    pub basket_total_minor: Option<i64>,
    pub needs_reconciliation: bool,
    pub data_completeness_score: i32,
    pub service_session_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub completed_at: DateTime<Utc>,
    pub voided_at: Option<DateTime<Utc>>,
}

/// One grant's part of a payment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromoPart {
    pub grant_id: String,
    pub amount_minor: i64,
}

impl From<payment::Model> for Payment {
    fn from(p: payment::Model) -> Self {
        Payment {
            feed_status: feed_status(&p),
            can: reversibility(&p),
            split: p.promo_split,
            id: p.id,
            merchant_id: p.merchant_id,
            integration_id: p.integration_id,
            branch_id: p.branch_id,
            terminal_id: p.terminal_id,
            cashier_id: p.cashier_id,
            wallet_id: p.wallet_id,
            status: p.status,
            credential_type: p.credential_type,
            amount_minor: p.amount_minor,
            currency: p.currency,
            debited_promo_minor: p.debited_promo_minor,
            debited_actual_minor: p.debited_actual_minor,
            refunded_minor: p.refunded_minor,
            order_ref: p.order_ref,
            basket: p.basket,
            basket_total_minor: p.basket_total_minor,
            needs_reconciliation: p.needs_reconciliation,
            data_completeness_score: p.data_completeness_score,
            service_session_id: p.service_session_id,
            created_at: p.created_at,
            completed_at: p.completed_at,
            voided_at: p.voided_at,
        }
    }
}

impl Payment {
    /// The promotional grants that paid, in the order they were drawn.
    pub fn promo_split(&self) -> Vec<PromoPart> {
        self.split
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| {
                Some(PromoPart {
                    grant_id: x.get(0)?.as_str()?.to_string(),
                    amount_minor: x.get(1)?.as_i64()?,
                })
            })
            .collect()
    }
}

/// A refund or void of a payment as partners read it.
#[derive(Clone, Debug)]
pub struct Refund {
    pub id: Uuid,
    pub payment_id: Uuid,
    /// `refund` or `void`.
    pub kind: String,
    pub amount_minor: i64,
    /// Back to the wallet's actual money.
    pub returned_actual_minor: i64,
    /// Back to promotional grants that can still hold it.
    pub returned_promo_minor: i64,
    /// Promotional parts whose grant had expired or was clawed back: not revived.
    pub forfeited_promo_minor: i64,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl From<payment_refund::Model> for Refund {
    fn from(r: payment_refund::Model) -> Self {
        Refund {
            id: r.id,
            payment_id: r.payment_id,
            kind: r.kind,
            amount_minor: r.amount_minor,
            returned_actual_minor: r.to_actual_minor,
            returned_promo_minor: r.amount_minor - r.to_actual_minor - r.forfeited_promo_minor,
            forfeited_promo_minor: r.forfeited_promo_minor,
            reason: r.reason,
            created_at: r.created_at,
        }
    }
}

/// A payment with its refunds, oldest first.
#[derive(Clone, Debug)]
pub struct WithRefunds {
    pub payment: Payment,
    pub refunds: Vec<Refund>,
}
