//! `promo_grant.accrued`, written by every path that accrues a grant (a top-up's bonus,
//! cashback, an offer's reward). A leaf, so those paths share it without importing each other.
use chrono::{DateTime, Utc};
use entities::wallet;
use serde_json::json;
use uuid::Uuid;

use super::events::{NewOutbox, OutboxKind};

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
