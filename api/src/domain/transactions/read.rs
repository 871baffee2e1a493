//! What partners read of a dispute: the domain's read model, so the HTTP edge names no
//! table. Here rather than in `disputes`, which uses the feed's `locate`: the feed's detail
//! lists disputes without a circle.
use chrono::{DateTime, Utc};
use entities::{dispute, dispute::DisputeStatus};
use uuid::Uuid;

/// A dispute as partners read it: the domain's read model, so the HTTP edge names no table.
#[derive(Clone, Debug)]
pub struct Dispute {
    pub id: Uuid,
    pub transaction_id: Uuid,
    /// `payment` or `topup`.
    pub transaction_kind: String,
    pub status: DisputeStatus,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    /// What went back to the customer when they won.
    pub recovered_minor: i64,
    /// What the customer won but the service could not move.
    pub unrecovered_minor: i64,
    /// The refund or top-up reversal the resolution made.
    pub movement_id: Option<Uuid>,
    pub resolution_note: Option<String>,
    pub created_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
}

impl From<dispute::Model> for Dispute {
    fn from(d: dispute::Model) -> Self {
        Dispute {
            id: d.id,
            transaction_id: d.transaction_id,
            transaction_kind: d.transaction_kind,
            status: d.status,
            amount_minor: d.amount_minor,
            currency: d.currency,
            reason: d.reason,
            recovered_minor: d.recovered_minor,
            unrecovered_minor: d.unrecovered_minor,
            movement_id: d.movement_id,
            resolution_note: d.resolution_note,
            created_at: d.created_at,
            resolved_at: d.resolved_at,
        }
    }
}
