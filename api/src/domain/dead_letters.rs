//! Draining the dead-letter store: replay and purge, each one transaction that changes the
//! dead letter conditionally, writes what follows from it and audits it. A replay writes
//! the job back to the outbox (a new job id, so providers that deduplicate on it deliver
//! once more), and only a letter still `dead` can be replayed: replaying twice delivers
//! once more, not twice.
use chrono::Utc;
use sea_orm::DatabaseConnection;
use serde_json::json;
use uuid::Uuid;

use super::{
    events::{NewOutbox, OutboxKind},
    operators,
};
use crate::{error::ApiError, store};

/// A dead letter's states: still dead, replayed onto its queue, or purged.
pub const STATUSES: &[&str] = &["dead", "replayed", "purged"];

#[derive(Debug, PartialEq, Eq)]

pub enum Outcome {
    /// Done now; for a replay, the id of the new job.
    Done(Option<Uuid>),
    /// The letter was no longer `dead` (already replayed or purged): nothing changed.
    NotDead(String),
}

pub async fn replay(db: &DatabaseConnection, id: Uuid, actor: &str) -> Result<Outcome, ApiError> {
    let txn = store::begin(db).await?;
    let Some(dl) = store::dead_letters::find(&txn, id).await? else {
        return Err(ApiError::not_found("Dead letter"));
    };
    let changed = store::dead_letters::mark_replayed(&txn, &dl, Utc::now()).await?;
    if changed == 0 {
        return Ok(Outcome::NotDead(dl.status));
    }
    let job_id = store::outbox::append(
        &txn,
        NewOutbox {
            kind: OutboxKind::Job,
            topic: dl.queue.clone(),
            merchant_id: dl.merchant_id,
            resource_type: "dead_letter".into(),
            resource_id: dl.id.to_string(),
            payload: dl.payload.clone(),
            occurred_at: Utc::now(),
        },
    )
    .await?;
    operators::audit(
        &txn,
        actor,
        "dead_letter.replay",
        "dead_letter",
        Some(id.to_string()),
        None,
        json!({"queue": dl.queue, "original_job_id": dl.job_id, "new_job_id": job_id}),
    )
    .await?;
    txn.commit().await?;
    Ok(Outcome::Done(Some(job_id)))
}

pub async fn purge(
    db: &DatabaseConnection,
    id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<Outcome, ApiError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(ApiError::field(
            "reason",
            "required",
            "a reason of 1 to 500 characters is required",
        ));
    }
    let txn = store::begin(db).await?;
    let Some(dl) = store::dead_letters::find(&txn, id).await? else {
        return Err(ApiError::not_found("Dead letter"));
    };
    let changed = store::dead_letters::mark_purged(&txn, id, reason, Utc::now()).await?;
    if changed == 0 {
        return Ok(Outcome::NotDead(dl.status));
    }
    operators::audit(
        &txn,
        actor,
        "dead_letter.purge",
        "dead_letter",
        Some(id.to_string()),
        Some(reason.to_string()),
        json!({"queue": dl.queue, "job_id": dl.job_id}),
    )
    .await?;
    txn.commit().await?;
    Ok(Outcome::Done(None))
}
