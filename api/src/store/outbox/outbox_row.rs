//! An outbox row to write. The transactional outbox: every catalog event and every job is
//! written as an outbox row
//! in the same transaction as the change that caused it. A relay moves committed rows onto
//! the job queues afterwards, so a rolled-back change enqueues nothing and a crash between
//! commit and enqueue loses nothing.
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboxKind {
    /// A catalog event (`payment.completed` ...) for webhook subscribers.
    Event,
    /// Work for a job queue (`sms_send` ...).
    Job,
}

impl OutboxKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxKind::Event => "event",
            OutboxKind::Job => "job",
        }
    }
}

#[derive(Clone, Debug)]
pub struct NewOutbox {
    pub kind: OutboxKind,
    /// The event type or the queue name.
    pub topic: String,
    pub merchant_id: Option<Uuid>,
    /// The resource whose events are ordered by `sequence_number`.
    pub resource_type: String,
    pub resource_id: String,
    pub payload: Value,
    pub occurred_at: DateTime<Utc>,
}
