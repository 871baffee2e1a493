//! A customer's pending-proof window: what opens one (an enrollment, a credit for an
//! unverified customer, an operator), and the identity events every path that creates or
//! credits a customer writes. A leaf: wallets, top-ups and settlements open windows without
//! importing enrollment's flows, which import them.
use chrono::{DateTime, Duration, Utc};
use entities::{enrollment, enrollment::EnrollmentStatus, wallet, wallet_user};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::outbox::events::{NewOutbox, OutboxKind};
use crate::{error::ApiError, store};

/// What a held credit holds: the wallet's actual money and locked promotional credit.
#[derive(Clone, Copy, Debug)]
pub struct Held {
    pub actual_minor: i64,
    pub promo_locked_minor: i64,
}

/// What opened a pending-proof window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Initiate,
    /// A credit for a customer who has not proven the phone yet.
    Credit,
    Operator,
}

impl Origin {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Origin::Initiate => "initiate",
            Origin::Credit => "credit",
            Origin::Operator => "operator",
        }
    }
}

/// An event of a customer identity (`wallet_user`), in its sequence.
pub(crate) fn event(
    topic: &str,
    identity: &wallet_user::Model,
    data: serde_json::Value,
    now: DateTime<Utc>,
) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: topic.into(),
        merchant_id: Some(identity.merchant_id),
        resource_type: "wallet_user".into(),
        resource_id: identity.id.to_string(),
        payload: data,
        occurred_at: now,
    }
}

pub(crate) fn new_enrollment(
    identity: &wallet_user::Model,
    program: Uuid,
    origin: Origin,
    window: Duration,
    now: DateTime<Utc>,
) -> enrollment::Model {
    enrollment::Model {
        id: Uuid::now_v7(),
        merchant_id: identity.merchant_id,
        wallet_user_id: identity.id,
        wallet_program_id: program,
        integration_id: None,
        is_sandbox: false,
        status: EnrollmentStatus::Pending,
        origin: origin.as_str().into(),
        language: None,
        provider_customer_id: None,
        card_fingerprint_hash: None,
        service_session_id: None,
        code_hash: None,
        code_expires_at: None,
        code_failed_attempts: 0,
        sends: 0,
        last_sent_at: None,
        expires_at: now + window,
        created_at: now,
        updated_at: now,
        verified_at: None,
        expired_at: None,
        terminal_id: None,
    }
}

/// The identity's open window, or a new one (no SMS: a credit or an operator opened it).
/// The caller holds the identity locked.
pub async fn open_window<C: ConnectionTrait>(
    c: &C,
    identity: &wallet_user::Model,
    program: Uuid,
    origin: Origin,
    window: Duration,
    now: DateTime<Utc>,
) -> Result<enrollment::Model, ApiError> {
    if let Some(e) = store::customers::enrollments::pending_of(c, identity.id).await? {
        return Ok(e);
    }
    let e = new_enrollment(identity, program, origin, window, now);
    store::customers::enrollments::insert(c, e.clone()).await?;
    Ok(e)
}

/// `enrollment.pending_proof`: a credit landed for a customer who has not proven the phone
/// and is held (actual money cannot be spent, grants stay LOCKED) until they do.
pub fn credit_held_event(
    identity: &wallet_user::Model,
    w: &wallet::Model,
    balance: Held,
    cause: &str,
    cause_id: Uuid,
    now: DateTime<Utc>,
) -> NewOutbox {
    event(
        "enrollment.pending_proof",
        identity,
        json!({
            "wallet_user_id": identity.id.to_string(),
            "wallet_id": w.id.to_string(),
            "wallet_program_id": w.wallet_program_id.to_string(),
            "cause": cause,
            "cause_id": cause_id.to_string(),
            "held_actual_minor": balance.actual_minor,
            "held_promo_minor": balance.promo_locked_minor,
            "currency": w.currency,
        }),
        now,
    )
}

/// `customer.enrolled`: a new customer identity exists at the merchant.
pub fn enrolled_event(
    identity: &wallet_user::Model,
    w: &wallet::Model,
    enrollment_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> NewOutbox {
    event(
        "customer.enrolled",
        identity,
        json!({
            "wallet_user_id": identity.id.to_string(),
            "wallet_id": w.id.to_string(),
            "wallet_program_id": w.wallet_program_id.to_string(),
            "state": identity.state,
            "enrollment_id": enrollment_id.map(|e| e.to_string()),
        }),
        now,
    )
}
