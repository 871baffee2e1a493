//! The service's own operators over any tenant's endpoint: re-enable it and recover what
//! failed or was held back, each audited with a reason. The partner's own `enable` and
//! `redeliver_failed` share the steps after the lock (`enable_locked`, `recover_locked`).
use chrono::{DateTime, Utc};
use entities::webhook_subscription;
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::webhooks::{DEAD, SUSPENDED, enable_locked, recover_locked};
use crate::{domain, error::ApiError, store};

/// An operator re-enables any tenant's endpoint (one auto-disabled after its failures, say),
/// as the partner's own `enable` does, audited with the reason.
pub async fn operator_enable(
    txn: &impl ConnectionTrait,
    actor: &str,
    id: Uuid,
    replay_missed: bool,
    reason: &str,
) -> Result<(webhook_subscription::Model, u64, u64), ApiError> {
    let reason = domain::operators::dead_letters::reason(reason)?;
    let s = store::webhooks::lock_subscription(txn, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Subscription"))?;
    let before = (s.state, s.disabled_reason.clone());
    let done = enable_locked(txn, s, replay_missed, Utc::now()).await?;
    domain::operators::audit(
        txn,
        actor,
        "webhook_endpoint.enable",
        "webhook_endpoint",
        Some(id.to_string()),
        Some(reason.to_string()),
        json!({"from": before.0, "disabled_reason": before.1, "missed": done.1, "replayed": done.2}),
    )
    .await?;
    Ok(done)
}

/// What "recover since T" would send again: deliveries DEAD or SUSPENDED created at or
/// after `since`.
pub async fn recoverable<C: ConnectionTrait>(
    db: &C,
    id: Uuid,
    since: DateTime<Utc>,
) -> Result<(webhook_subscription::Model, u64), ApiError> {
    let s = store::webhooks::find_subscription(db, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Subscription"))?;
    let n = store::webhooks::count_in_state_since(db, id, DEAD, since).await?
        + store::webhooks::count_in_state_since(db, id, SUSPENDED, since).await?;
    Ok((s, n))
}

/// An operator sends again every failed or suspended delivery since `since`, as the
/// partner's `redeliver_failed` does, audited with the reason. Returns how many.
pub async fn operator_recover(
    txn: &impl ConnectionTrait,
    actor: &str,
    id: Uuid,
    since: DateTime<Utc>,
    reason: &str,
) -> Result<u64, ApiError> {
    let reason = domain::operators::dead_letters::reason(reason)?;
    let s = store::webhooks::lock_subscription(txn, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Subscription"))?;
    let n = recover_locked(txn, s.id, since, Utc::now()).await?;
    domain::operators::audit(
        txn,
        actor,
        "webhook_endpoint.recover",
        "webhook_endpoint",
        Some(id.to_string()),
        Some(reason.to_string()),
        json!({"since": since, "requeued": n}),
    )
    .await?;
    Ok(n)
}
