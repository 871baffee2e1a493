//! A crossing of a risk threshold, recorded: each subject (a terminal, branch, merchant or
//! wallet) and rule has one row holding its latest crossing; a crossing while the last one
//! is still in force moves only its counts, so `risk.limit_reached` fires once per crossing
//! and not on every refused attempt.
use chrono::{DateTime, Utc};
use entities::risk_block;
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use super::Scope;
use crate::{
    domain::outbox::events::{NewOutbox, OutboxKind},
    error::ApiError,
    store::{self, Db},
};

pub const EVENT: &str = "risk.limit_reached";

/// A threshold crossed just now.
#[derive(Clone, Debug)]
pub struct Crossing {
    pub merchant_id: Uuid,
    pub is_sandbox: bool,
    pub scope: Scope,
    pub subject: String,
    pub rule: &'static str,
    pub threshold: i64,
    pub window_secs: i64,
    /// What was counted when it crossed (failures, payments, or minor units).
    pub observed: i64,
    /// When the block it causes ends (its window has moved past enough of it).
    pub until: DateTime<Utc>,
}

/// Records a crossing in a transaction of its own, with its event if it is a new one.
pub async fn record(db: &Db, x: Crossing, now: DateTime<Utc>) -> Result<(), ApiError> {
    let txn = store::begin(db).await?;
    record_in(&txn, x, now).await?;
    txn.commit().await?;
    Ok(())
}

/// `record` in the caller's transaction.
pub async fn record_in<C: ConnectionTrait>(
    c: &C,
    x: Crossing,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let row = risk_block::Model {
        id: Uuid::now_v7(),
        merchant_id: x.merchant_id,
        is_sandbox: x.is_sandbox,
        scope: x.scope.as_str().into(),
        subject: x.subject,
        rule: x.rule.into(),
        threshold: x.threshold,
        window_secs: x.window_secs,
        observed: x.observed,
        crossed_at: now,
        until: x.until,
        last_seen_at: now,
        crossings: 1,
        cleared_at: None,
        cleared_by: None,
        clear_reason: None,
    };
    if let Some(new) = store::payments::risk::record_crossing(c, row).await? {
        store::outbox::append(c, event(&new)).await?;
    }
    Ok(())
}

/// `risk.limit_reached` for a crossing.
fn event(b: &risk_block::Model) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: EVENT.into(),
        merchant_id: Some(b.merchant_id),
        resource_type: "risk_block".into(),
        resource_id: b.id.to_string(),
        payload: json!({
            "block_id": b.id.to_string(),
            "scope": b.scope,
            "subject": subject_view(&b.scope, &b.subject),
            "rule": b.rule,
            "threshold": b.threshold,
            "window_seconds": b.window_secs,
            "observed": b.observed,
            "crossed_at": ts(b.crossed_at),
            "until": ts(b.until),
            "sandbox": b.is_sandbox,
        }),
        occurred_at: b.crossed_at,
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// How a subject is shown: a terminal as `{"terminal_id": ...}` or `{"api_key_id": ...}`,
/// anything else by its id.
pub fn subject_view(scope: &str, subject: &str) -> serde_json::Value {
    match (scope, subject.split_once(':')) {
        ("terminal", Some(("terminal", t))) => json!({"terminal_id": t}),
        ("terminal", Some(("key", k))) => json!({"api_key_id": k}),
        ("terminal", Some(("integration", i))) => json!({"integration_id": i}),
        (s, _) => json!({ format!("{s}_id"): subject }),
    }
}
