//! The blocks in force, as operators see them (each subject's latest crossing, see
//! `crossings`), and clearing a failure block, which also empties its window.
use chrono::Utc;
use entities::risk_block;
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use super::{Scope, crossings::subject_view, failures};
use crate::{error::ApiError, infra::kv::Failure, store};

/// A block in force, as operators see it.
#[derive(Clone, Debug)]
pub struct Block {
    pub row: risk_block::Model,
    /// The latest failures in its window (failure blocks only), newest first.
    pub last_attempts: Vec<Failure>,
}

/// Blocks in force now, of one merchant or all, the newest first, each with its latest
/// failures.
pub async fn active(
    f: &failures::Failures<'_>,
    merchant: Option<Uuid>,
    limit: u64,
) -> Result<Vec<Block>, ApiError> {
    let rows = store::payments::risk::active(f.db, merchant, Utc::now(), limit).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let last_attempts = match window_of(f, &row) {
            Some(w) => f.kv.recent_failures(&w, 10).await?,
            None => vec![],
        };
        out.push(Block { row, last_attempts });
    }
    Ok(out)
}

fn window_of(
    f: &failures::Failures<'_>,
    b: &risk_block::Model,
) -> Option<crate::infra::kv::FailureWindow> {
    if b.rule != failures::RULE {
        return None;
    }
    f.window(
        b.merchant_id,
        b.is_sandbox,
        Scope::parse(&b.scope)?,
        &b.subject,
    )
}

/// Clears block `id` in the caller's transaction: a failure block's window is emptied, so its subject may enter
/// credentials again at once. A velocity limit's block cannot be cleared (the payments it
/// counts are still in its window; the merchant raises the limit instead): CONFLICT.
/// Audited with the operator and the reason.
pub async fn clear<C: ConnectionTrait>(
    txn: &C,
    f: &failures::Failures<'_>,
    id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<risk_block::Model, ApiError> {
    let now = Utc::now();
    let b = store::payments::risk::lock_block(txn, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Risk block"))?;
    let Some(window) = window_of(f, &b) else {
        return Err(ApiError::conflict(
            "A velocity limit's block ends as its window moves on; the merchant changes its limits (PUT /v1/risk/limits) to lift it.",
        ));
    };
    if b.cleared_at.is_some() || b.until <= now {
        return Err(ApiError::conflict("This block is no longer in force."));
    }
    store::payments::risk::clear_block(txn, id, actor, reason, now).await?;
    crate::domain::operators::audit(
        txn,
        actor,
        "risk_block.clear",
        "risk_block",
        Some(id.to_string()),
        Some(reason.to_string()),
        json!({
            "merchant_id": b.merchant_id.to_string(),
            "scope": b.scope,
            "subject": subject_view(&b.scope, &b.subject),
            "rule": b.rule,
            "observed": b.observed,
        }),
    )
    .await?;
    // Before the caller commits: if the commit fails, the block still shows and clearing
    // it again does no harm.
    f.kv.forget_failures(&window).await?;
    Ok(risk_block::Model {
        cleared_at: Some(now),
        cleared_by: Some(actor.to_string()),
        clear_reason: Some(reason.to_string()),
        ..b
    })
}
