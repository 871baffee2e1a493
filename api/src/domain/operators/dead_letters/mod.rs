//! Draining the dead-letter store: replay and purge, each one transaction that changes the
//! dead letter conditionally, writes what follows from it and audits it. A replay writes
//! the job back to the outbox (a new job id, so providers that deduplicate on it deliver
//! once more), and only a letter still `dead` can be replayed: replaying twice delivers
//! once more, not twice.
//!
//! The operator HTTP API, the console and `wallet-worker dlq` all read filters with
//! [`parse_filter`] and act through [`replay`], [`purge`] and [`bulk`]: one implementation
//! of each action, whichever tool an operator holds.
mod filter;

pub use filter::*;

use crate::store::Db;
use chrono::{DateTime, Utc};
use entities::{dead_letter, dead_letter::DeadLetterStatus};
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::{
    operators,
    outbox::events::{NewOutbox, OutboxKind},
};
use crate::{
    error::ApiError,
    store::{self, queues::dead_letters::Filter},
};

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done now; for a replay, the id of the new job.
    Done(Option<Uuid>),
    /// The letter was no longer `dead` (already replayed or purged): nothing changed.
    NotDead(DeadLetterStatus),
}

impl Outcome {
    /// `replayed` / `purged` for `done`, `unchanged` when the letter was no longer dead.
    pub fn word(&self, action: Action) -> &'static str {
        match self {
            Outcome::Done(_) => action.done(),
            Outcome::NotDead(_) => "unchanged",
        }
    }
}

/// Words that mark a payload key whose value never leaves the store: credentials, codes,
/// phone numbers, message bodies and sealed (encrypted) blobs.
const SECRET_WORDS: &[&str] = &[
    "secret",
    "token",
    "password",
    "code",
    "otp",
    "pin",
    "phone",
    "sealed",
    "body",
    "authorization",
];

/// Whole key names that are credentials (`resource_key` and `idempotency_key` are not).
const SECRET_NAMES: &[&str] = &["key", "api_key", "raw_key", "operator_key", "private_key"];

/// A payload fit to show an operator: the value of every key that names a secret (a word
/// of `SECRET_WORDS`, or a name of `SECRET_NAMES`) is replaced by `"[redacted]"`.
pub fn redact(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let k_lower = k.to_ascii_lowercase();
                    let secret = SECRET_NAMES.contains(&k_lower.as_str())
                        || k_lower
                            .split(|c: char| !c.is_ascii_alphanumeric())
                            .any(|w| SECRET_WORDS.contains(&w));
                    let shown = if secret && !v.is_null() {
                        Value::String("[redacted]".into())
                    } else {
                        redact(v)
                    };
                    (k.clone(), shown)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(redact).collect()),
        other => other.clone(),
    }
}

/// A reason of 1 to 500 characters, trimmed.
pub fn reason(r: &str) -> Result<&str, ApiError> {
    let r = r.trim();
    if r.is_empty() || r.chars().count() > 500 {
        return Err(ApiError::field(
            "reason",
            "required",
            "a reason of 1 to 500 characters is required",
        ));
    }
    Ok(r)
}

/// A dead letter as the operator tools show it: the domain's read model, so the HTTP edge
/// names no table.
#[derive(Clone, Debug)]
pub struct DeadLetter {
    pub id: Uuid,
    pub job_id: Uuid,
    pub queue: String,
    pub job_type: String,
    pub merchant_id: Option<Uuid>,
    pub status: DeadLetterStatus,
    pub attempts: i32,
    pub last_error: String,
    /// Every failed attempt: `{attempt, at, error}`.
    pub error_history: Value,
    pub first_enqueued_at: DateTime<Utc>,
    pub dead_at: DateTime<Utc>,
    pub replay_count: i32,
    pub purge_reason: Option<String>,
}

impl From<dead_letter::Model> for DeadLetter {
    fn from(d: dead_letter::Model) -> Self {
        DeadLetter {
            id: d.id,
            job_id: d.job_id,
            queue: d.queue,
            job_type: d.job_type,
            merchant_id: d.merchant_id,
            status: d.status,
            attempts: d.attempts,
            last_error: d.last_error,
            error_history: d.error_history,
            first_enqueued_at: d.first_enqueued_at,
            dead_at: d.dead_at,
            replay_count: d.replay_count,
            purge_reason: d.purge_reason,
        }
    }
}

/// Up to `limit` letters matching `f`, newest first, below the cursor `before`.
pub async fn list(
    db: &Db,
    f: &Filter,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<DeadLetter>, ApiError> {
    let rows = store::queues::dead_letters::list(db, f, before, limit).await?;
    Ok(rows.into_iter().map(DeadLetter::from).collect())
}

/// One letter, whatever its status.
pub async fn find(db: &Db, id: Uuid) -> Result<DeadLetter, ApiError> {
    store::queues::dead_letters::find(db, id)
        .await?
        .map(DeadLetter::from)
        .ok_or_else(|| ApiError::not_found("Dead letter"))
}

/// Replays one letter. `why` is optional here (the HTTP operation takes none); the console
/// and bulk replays always give one.
pub async fn replay(
    txn: &impl ConnectionTrait,
    id: Uuid,
    actor: &str,
    why: Option<&str>,
) -> Result<Outcome, ApiError> {
    let why = why.map(reason).transpose()?;
    let Some(dl) = store::queues::dead_letters::find(txn, id).await? else {
        return Err(ApiError::not_found("Dead letter"));
    };
    let changed = store::queues::dead_letters::mark_replayed(txn, &dl, Utc::now()).await?;
    if changed == 0 {
        return Ok(Outcome::NotDead(dl.status));
    }
    let job_id = store::outbox::append(
        txn,
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
        txn,
        actor,
        "dead_letter.replay",
        "dead_letter",
        Some(id.to_string()),
        why.map(str::to_string),
        json!({"queue": dl.queue, "original_job_id": dl.job_id, "new_job_id": job_id}),
    )
    .await?;
    Ok(Outcome::Done(Some(job_id)))
}

/// Purges one letter, with its mandatory reason.
pub async fn purge(
    txn: &impl ConnectionTrait,
    id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<Outcome, ApiError> {
    let reason = self::reason(reason)?;
    let Some(dl) = store::queues::dead_letters::find(txn, id).await? else {
        return Err(ApiError::not_found("Dead letter"));
    };
    let changed = store::queues::dead_letters::mark_purged(txn, id, reason, Utc::now()).await?;
    if changed == 0 {
        return Ok(Outcome::NotDead(dl.status));
    }
    operators::audit(
        txn,
        actor,
        "dead_letter.purge",
        "dead_letter",
        Some(id.to_string()),
        Some(reason.to_string()),
        json!({"queue": dl.queue, "job_id": dl.job_id}),
    )
    .await?;
    Ok(Outcome::Done(None))
}

/// Replays or purges one letter in its own transaction: what the console, the CLI and a bulk
/// action do per letter.
pub async fn act(
    db: &Db,
    action: Action,
    id: Uuid,
    actor: &str,
    why: &str,
) -> Result<Outcome, ApiError> {
    store::in_transaction(db, async |txn| match action {
        Action::Replay => replay(txn, id, actor, Some(why)).await,
        Action::Purge => purge(txn, id, actor, why).await,
    })
    .await
}

/// Replay or purge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Replay,
    Purge,
}

impl Action {
    fn done(self) -> &'static str {
        match self {
            Action::Replay => "replayed",
            Action::Purge => "purged",
        }
    }

    fn audit_name(self) -> &'static str {
        match self {
            Action::Replay => "dead_letter.bulk_replay",
            Action::Purge => "dead_letter.bulk_purge",
        }
    }
}

/// One letter a bulk action reached: what happened to it, or in a dry run `None`.
pub struct Step<'a> {
    pub letter: &'a dead_letter::Model,
    pub result: Option<&'a Result<Outcome, ApiError>>,
}

impl Step<'_> {
    /// What happened to the letter: `replayed` / `purged`, `unchanged` or `failed` with the
    /// error's message; `None` in a dry run (each tool words "would ..." its own way).
    pub fn outcome(&self, action: Action) -> Option<(&'static str, Option<String>)> {
        self.result.map(|r| match r {
            Ok(o) => (o.word(action), None),
            Err(e) => (
                "failed",
                Some(
                    e.to_body()["message"]
                        .as_str()
                        .unwrap_or("failed")
                        .to_string(),
                ),
            ),
        })
    }
}

/// What a bulk action did (or in a dry run, would do).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BulkSummary {
    pub dry_run: bool,
    /// Dead letters that matched the filter.
    pub matched: u64,
    /// Replayed or purged now.
    pub changed: u64,
    /// No longer dead when reached (another operator got there first).
    pub unchanged: u64,
    /// Failed (the error is in the step); the rest still ran.
    pub failed: u64,
}

const BULK_PAGE: u64 = 200;

/// Acts on every dead letter matching `f` (its status forced to `dead`), page by page
/// down the id index with no cap, each letter in its own audited transaction as
/// [`replay`] and [`purge`] do; a dry run only reads. `each` sees every letter reached.
/// A letter that fails does not stop the rest. A finished bulk action is also audited as
/// a whole, with the filter, the reason and the counts.
pub async fn bulk(
    db: &Db,
    f: &Filter,
    action: Action,
    actor: &str,
    why: &str,
    dry_run: bool,
    each: impl FnMut(Step<'_>),
) -> Result<BulkSummary, ApiError> {
    let sum = bulk_steps(db, f, action, actor, why, dry_run, each).await?;
    audit_bulk(db, f, action, actor, why, &sum).await?;
    Ok(sum)
}

/// A bulk action's letters, each in its own transaction, without the audit of the whole
/// (which the HTTP operation writes with its idempotency record).
pub async fn bulk_steps(
    db: &Db,
    f: &Filter,
    action: Action,
    actor: &str,
    why: &str,
    dry_run: bool,
    mut each: impl FnMut(Step<'_>),
) -> Result<BulkSummary, ApiError> {
    let why = reason(why)?;
    let f = Filter {
        status: Some("dead".into()),
        ..f.clone()
    };
    let mut sum = BulkSummary {
        dry_run,
        ..BulkSummary::default()
    };
    let mut before = None;
    loop {
        let page = store::queues::dead_letters::list(db, &f, before, BULK_PAGE).await?;
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        for letter in &page {
            sum.matched += 1;
            if dry_run {
                each(Step {
                    letter,
                    result: None,
                });
                continue;
            }
            let r = act(db, action, letter.id, actor, why).await;
            match &r {
                Ok(Outcome::Done(_)) => sum.changed += 1,
                Ok(Outcome::NotDead(_)) => sum.unchanged += 1,
                Err(_) => sum.failed += 1,
            }
            each(Step {
                letter,
                result: Some(&r),
            });
        }
        if (page.len() as u64) < BULK_PAGE {
            break;
        }
    }
    Ok(sum)
}

/// Audits a finished bulk action as a whole, with its filter, reason and counts; a dry run
/// changed nothing and is not audited.
pub async fn audit_bulk<C: ConnectionTrait>(
    c: &C,
    f: &Filter,
    action: Action,
    actor: &str,
    why: &str,
    sum: &BulkSummary,
) -> Result<(), ApiError> {
    if sum.dry_run {
        return Ok(());
    }
    let f = Filter {
        status: Some("dead".into()),
        ..f.clone()
    };
    operators::audit(
        c,
        actor,
        action.audit_name(),
        "dead_letter",
        None,
        Some(reason(why)?.to_string()),
        json!({"filter": describe(&f), "summary": sum}),
    )
    .await
}

/// How many dead letters match and the first `n` of them (newest first): what a bulk
/// action would reach, before anyone asks for it.
pub async fn preview(
    db: &Db,
    f: &Filter,
    n: u64,
) -> Result<(u64, Vec<dead_letter::Model>), ApiError> {
    let f = Filter {
        status: Some("dead".into()),
        ..f.clone()
    };
    Ok((
        store::queues::dead_letters::count(db, &f).await?,
        store::queues::dead_letters::list(db, &f, None, n).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_a_payload_are_redacted_wherever_they_nest() {
        let p = json!({
            "integration_id": "i-1",
            "phone_sealed": "v1.abc",
            "request": {"verification_token": "t", "amount_minor": 5, "headers": [{"authorization": "Bearer x"}]},
            "code": "424242",
            "resource_key": "payment:1",
            "api_key": "wk_live_x",
            "webhook_secret": null,
        });
        let r = redact(&p);
        assert_eq!(r["integration_id"], "i-1");
        assert_eq!(r["phone_sealed"], "[redacted]");
        assert_eq!(r["request"]["verification_token"], "[redacted]");
        assert_eq!(r["request"]["amount_minor"], 5);
        assert_eq!(r["request"]["headers"][0]["authorization"], "[redacted]");
        assert_eq!(r["code"], "[redacted]");
        assert_eq!(r["resource_key"], "payment:1");
        assert_eq!(r["api_key"], "[redacted]");
        assert_eq!(r["webhook_secret"], Value::Null);
    }
}
