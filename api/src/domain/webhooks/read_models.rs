//! What partners read of their webhook endpoints and of the deliveries to them: the
//! domain's read models, so the HTTP edge names no table. A leaf: it reads rows, never the
//! rest of `webhooks`.
use chrono::{DateTime, Utc};
use entities::{
    webhook_attempt, webhook_delivery, webhook_delivery::DeliveryState, webhook_subscription,
    webhook_subscription::SubscriptionState,
};
use uuid::Uuid;

/// A webhook endpoint as the partner reads it at a moment.
#[derive(Clone, Debug)]
pub struct Subscription {
    pub id: Uuid,
    pub url: String,
    pub description: Option<String>,
    /// The event types it wants; None: every one.
    pub event_types: Option<Vec<String>>,
    /// The merchant whose events it gets; None: every merchant of the integration.
    pub merchant_id: Option<Uuid>,
    pub state: SubscriptionState,
    /// `manual`, or `failing` when sustained failure disabled it.
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<DateTime<Utc>>,
    /// Failed attempts in a row (reset by a success).
    pub failure_streak: i32,
    /// When the rotated-out secret stops signing beside the current one; None when there
    /// is none, or its grace had ended at the moment read.
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub is_sandbox: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Subscription {
    /// The subscription as read at `now` (the previous secret's grace may have ended).
    pub(super) fn at(s: webhook_subscription::Model, now: DateTime<Utc>) -> Self {
        Subscription {
            id: s.id,
            url: s.url,
            description: s.description,
            event_types: s.event_types.and_then(|v| serde_json::from_value(v).ok()),
            merchant_id: s.merchant_id,
            state: s.state,
            disabled_reason: s.disabled_reason,
            disabled_at: s.disabled_at,
            failure_streak: s.failure_streak,
            previous_secret_expires_at: s.previous_secret_until.filter(|u| *u > now),
            is_sandbox: s.is_sandbox,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// One event for an endpoint as the partner reads it, with every attempt.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub sequence_number: i64,
    /// PENDING (being sent or retried), DELIVERED, DEAD (retries ran out) or SUSPENDED
    /// (the endpoint was disabled).
    pub state: DeliveryState,
    /// Attempts made in the current series.
    pub attempts_made: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Every HTTP attempt, in the order the store gives them.
    pub attempts: Vec<Attempt>,
}

impl Delivery {
    /// The delivery with its attempts.
    pub(super) fn of(d: webhook_delivery::Model, attempts: Vec<webhook_attempt::Model>) -> Self {
        Delivery {
            id: d.id,
            event_id: d.event_id,
            event_type: d.event_type,
            sequence_number: d.sequence_number,
            state: d.state,
            attempts_made: d.attempts,
            last_status_code: d.last_status_code,
            last_error: d.last_error,
            next_attempt_at: d.next_attempt_at,
            delivered_at: d.delivered_at,
            created_at: d.created_at,
            attempts: attempts.into_iter().map(Attempt::from).collect(),
        }
    }
}

/// One HTTP attempt of a delivery.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    /// The endpoint's HTTP status; None when it never answered (timeout, refused).
    pub status_code: Option<i32>,
    pub latency_ms: i64,
    pub error: Option<String>,
    pub succeeded: bool,
    /// When the next attempt is due, if one is scheduled.
    pub next_retry_at: Option<DateTime<Utc>>,
}

impl From<webhook_attempt::Model> for Attempt {
    fn from(a: webhook_attempt::Model) -> Self {
        Attempt {
            attempt: a.attempt,
            started_at: a.started_at,
            status_code: a.status_code,
            latency_ms: a.latency_ms,
            error: a.error,
            succeeded: a.succeeded,
            next_retry_at: a.next_retry_at,
        }
    }
}
