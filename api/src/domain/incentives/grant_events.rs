//! `promo_grant.accrued`, written by every path that accrues a grant (a top-up's bonus,
//! cashback, an offer's reward), and `promo_grant.released`. A leaf, so those paths share
//! them without importing each other.
use chrono::{DateTime, Utc};
use entities::{promo_grant, wallet, wallet_user};
use serde_json::json;
use uuid::Uuid;

use crate::domain::outbox::events::{NewOutbox, OutboxKind};

/// `promo_grant.accrued`.
pub fn accrued_event(
    g: &entities::promo_grant::Model,
    w: &wallet::Model,
    cause_id: Uuid,
    now: DateTime<Utc>,
) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: "promo_grant.accrued".into(),
        merchant_id: Some(w.merchant_id),
        resource_type: "promo_grant".into(),
        resource_id: g.id.to_string(),
        payload: json!({
            "grant_id": g.id.to_string(),
            "wallet_id": w.id.to_string(),
            "source": g.source,
            "state": g.state,
            "amount_minor": g.original_minor,
            "currency": g.currency,
            "expires_at": g.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "cause_id": cause_id.to_string(),
        }),
        occurred_at: now,
    }
}

/// `promo_grant.released`: a held grant is spendable, its customer having proven the phone.
pub fn released_event(
    g: &promo_grant::Model,
    w: &wallet::Model,
    identity: &wallet_user::Model,
    cause: &str,
    now: DateTime<Utc>,
) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: "promo_grant.released".into(),
        merchant_id: Some(w.merchant_id),
        resource_type: "promo_grant".into(),
        resource_id: g.id.to_string(),
        payload: json!({
            "grant_id": g.id.to_string(),
            "wallet_id": w.id.to_string(),
            "wallet_user_id": identity.id.to_string(),
            "source": g.source,
            "amount_minor": g.remaining_minor,
            "currency": g.currency,
            "expires_at": g.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "cause": cause,
        }),
        occurred_at: now,
    }
}
