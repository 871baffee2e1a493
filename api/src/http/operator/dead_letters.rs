//! Operator routes over the dead-letter store: list, show, replay and purge one letter,
//! and replay or purge every letter matching a filter (with a dry run). The console and
//! `wallet-worker dlq` act through the same `domain::operators::dead_letters` functions.
use chrono::SecondsFormat;
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::http::{
    openapi::tags::Tag,
    operator::{OperatorAction, OperatorAuth},
    pipeline::body::{JsonBody, Validate},
    pipeline::fields::{Cursor, DeadLetterStatuses, IntIn, JobQueues, PageLimit, Text, UuidText},
    pipeline::mutation::OptionalKey,
    pipeline::query_group::{Grouped, query_group},
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        operators::dead_letters,
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

pub struct OperatorDeadLettersApi;

/// A job that used its last attempt.
#[derive(Object, Serialize)]
pub struct DeadLetterView {
    pub dead_letter_id: String,
    pub job_id: String,
    pub queue: String,
    pub job_type: String,
    #[oai(nullable)]
    pub merchant_id: Option<String>,
    /// `dead`, `replayed` or `purged`.
    pub status: String,
    pub attempts: i32,
    pub last_error: String,
    /// Every failed attempt: `{attempt, at, error}`.
    pub error_history: serde_json::Value,
    pub first_enqueued_at: String,
    pub dead_at: String,
    pub replay_count: i32,
    #[oai(nullable)]
    pub purge_reason: Option<String>,
}

/// What a replay or purge did.
#[derive(Object, Serialize)]
pub struct DeadLetterAction {
    pub dead_letter_id: String,
    /// `replayed`, `purged`, or `unchanged` when the letter was no longer dead.
    pub outcome: String,
    /// The new job a replay enqueued.
    #[oai(nullable)]
    pub new_job_id: Option<String>,
}

/// Which dead letters a bulk action reaches: every one still dead, narrowed by each field
/// given.
#[derive(Object, Deserialize, Debug, Clone, Default)]
pub struct DeadLetterFilter {
    #[oai(nullable)]
    pub queue: Option<QueueField<JobQueues>>,
    #[oai(nullable)]
    pub job_type: Option<QueueField<JobQueues>>,
    /// Only letters of the merchants linked to this integration (a platform tenant).
    #[oai(nullable)]
    pub integration_id: Option<UuidText>,
    #[oai(nullable)]
    pub merchant_id: Option<UuidText>,
    /// Only letters dead for at least this many seconds (up to ten years).
    #[oai(nullable)]
    pub older_than_secs: Option<crate::http::pipeline::fields::IntIn<0, 315_360_000>>,
    /// Only letters whose last error contains this text (any case).
    #[oai(nullable)]
    pub error: Option<Text<1, 200>>,
}

/// Replay or purge every dead letter matching a filter.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct BulkDeadLetterRequest {
    /// Required, so that "every dead letter" is said on purpose: `{}` means all of them.
    pub filter: DeadLetterFilter,
    /// Why (kept in the audit log, for each letter and for the whole action).
    #[serde(default)]
    pub reason: Text<1, 500>,
    /// True: count and list what would be acted on; change nothing.
    #[oai(nullable)]
    pub dry_run: Option<bool>,
}

impl Validate for BulkDeadLetterRequest {
    fn validate(&self, e: &mut Errors) {
        let f = &self.filter;
        for (name, v) in [
            ("/filter/queue", &f.queue),
            ("/filter/job_type", &f.job_type),
        ] {
            if let Some(v) = v {
                v.check(e, name);
            }
        }
        crate::http::pipeline::common::optional_uuid(
            e,
            "/filter/integration_id",
            &f.integration_id,
        );
        crate::http::pipeline::common::optional_uuid(e, "/filter/merchant_id", &f.merchant_id);
        if let Some(v) = &f.older_than_secs {
            v.check(e, "/filter/older_than_secs");
        }
        if let Some(v) = &f.error {
            v.check(e, "/filter/error");
        }
        self.reason.check(e, "/reason");
    }
}

/// One letter a bulk action reached.
#[derive(Object, Serialize)]
pub struct BulkDeadLetterStep {
    pub dead_letter_id: String,
    pub queue: String,
    /// `would_replay` / `would_purge` in a dry run; else `replayed`, `purged`, `unchanged`
    /// (no longer dead when reached) or `failed`.
    pub outcome: String,
    #[oai(nullable)]
    pub error: Option<String>,
}

/// What a bulk action did, or in a dry run would do. The counts cover every match; the
/// list shows the first 100 letters reached.
#[derive(Object, Serialize)]
pub struct BulkDeadLetterResult {
    pub dry_run: bool,
    pub matched: u64,
    pub changed: u64,
    pub unchanged: u64,
    pub failed: u64,
    pub dead_letters: Vec<BulkDeadLetterStep>,
}

/// Steps listed in a bulk action's response.
const BULK_LISTED: usize = 100;

fn dead_letter_view(d: dead_letters::DeadLetter) -> DeadLetterView {
    let ts = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
    DeadLetterView {
        dead_letter_id: d.id.to_string(),
        job_id: d.job_id.to_string(),
        queue: d.queue,
        job_type: d.job_type,
        merchant_id: d.merchant_id.map(|m| m.to_string()),
        status: d.status.as_str().to_string(),
        attempts: d.attempts,
        last_error: d.last_error,
        error_history: d.error_history,
        first_enqueued_at: ts(d.first_enqueued_at),
        dead_at: ts(d.dead_at),
        replay_count: d.replay_count,
        purge_reason: d.purge_reason,
    }
}

fn action(id: Uuid, done: &str, out: dead_letters::Outcome) -> DeadLetterAction {
    match out {
        dead_letters::Outcome::Done(job) => DeadLetterAction {
            dead_letter_id: id.to_string(),
            outcome: done.into(),
            new_job_id: job.map(|j| j.to_string()),
        },
        dead_letters::Outcome::NotDead(_) => DeadLetterAction {
            dead_letter_id: id.to_string(),
            outcome: "unchanged".into(),
            new_job_id: None,
        },
    }
}

type QueueField<S> = crate::http::pipeline::fields::Field<crate::http::pipeline::fields::OneOf<S>>;

/// The filter's field names as query parameters (`tenant` is `integration_id` here).
fn query_fields(e: ApiError) -> ApiError {
    let fields = e.field_errors();
    if fields.is_empty() {
        return e;
    }
    ApiError::validation(
        fields
            .into_iter()
            .map(|f| {
                let name = match f.field.as_str() {
                    "tenant" => "integration_id",
                    "merchant" => "merchant_id",
                    other => other,
                };
                crate::error::FieldError::new(format!("query:{name}"), &f.issue, f.message)
            })
            .collect(),
    )
}

fn dead_letter_id(raw: &str) -> Result<Uuid, ApiError> {
    let mut e = Errors::default();
    validate::uuid(&mut e, "path:deadLetterId", raw).ok_or_else(|| ApiError::validation(e.0))
}

query_group! {
    /// Which dead letters, and the page.
    pub struct DeadLetterQuery {
        /// `dead` (default), `replayed` or `purged`.
        status: Option<QueueField<DeadLetterStatuses>> = "status",
        queue: Option<QueueField<JobQueues>> = "queue",
        job_type: Option<QueueField<JobQueues>> = "job_type",
        /// Only letters of the merchants linked to this integration (a platform tenant).
        integration_id: Option<UuidText> = "integration_id",
        merchant_id: Option<UuidText> = "merchant_id",
        /// Only letters dead for at least this many seconds (up to ten years).
        older_than_secs: Option<IntIn<0, 315_360_000>> = "older_than_secs",
        /// Only letters whose last error contains this text (any case, up to 200
        /// characters).
        error: Option<String> = "error",
        /// 1 to 200, default 50.
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

#[OpenApi(tag = "Tag::Platform")]
impl OperatorDeadLettersApi {
    /// List dead letters (operators)
    ///
    /// Jobs that used their last attempt, newest first, with their error history.
    #[oai(
        path = "/operator/dead-letters",
        method = "get",
        operation_id = "operatorListDeadLetters"
    )]
    async fn dead_letters(
        &self,
        state: Data<&AppState>,
        _auth: OperatorAuth,
        query: Grouped<DeadLetterQuery>,
    ) -> poem::Result<Reply<Vec<DeadLetterView>>> {
        let DeadLetterQuery {
            status,
            queue,
            job_type,
            integration_id,
            merchant_id,
            older_than_secs,
            error,
            limit,
            cursor,
        } = query.0;
        let mut e = Errors::default();
        if let Some(v) = &status {
            v.check(&mut e, "query:status");
        }
        for (name, v) in [("query:queue", &queue), ("query:job_type", &job_type)] {
            if let Some(v) = v {
                v.check(&mut e, name);
            }
        }
        if let Some(s) = &older_than_secs {
            s.check(&mut e, "query:older_than_secs");
        }
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let input = dead_letters::FilterInput {
            status: status.map(String::from),
            queue: queue.map(String::from),
            job_type: job_type.map(String::from),
            tenant: integration_id.map(String::from),
            merchant: merchant_id.map(String::from),
            older_than: older_than_secs.map(|s| s.0.to_string()),
            error,
        };
        let f = dead_letters::parse_filter(&input, chrono::Utc::now()).map_err(query_fields)?;
        let before = crate::http::pipeline::cursor::after("dead_letter", &cursor)?;
        let rows = dead_letters::list(&state.0.db, &f, before, limit + 1).await?;
        let (rows, more) = crate::domain::page_of(rows, limit);
        let page = crate::http::pipeline::cursor::page("dead_letter", &rows, more, |d| d.id);
        Ok(Reply::page(
            &rows.into_iter().map(dead_letter_view).collect::<Vec<_>>(),
            &page,
        ))
    }

    /// Show a dead letter (operators)
    #[oai(
        path = "/operator/dead-letters/:dead_letter_id",
        method = "get",
        operation_id = "operatorGetDeadLetter"
    )]
    async fn dead_letter(
        &self,
        state: Data<&AppState>,
        _auth: OperatorAuth,
        dead_letter_id: Path<UuidText>,
    ) -> poem::Result<Reply<DeadLetterView>> {
        let id = self::dead_letter_id(&dead_letter_id.0)?;
        let d = dead_letters::find(&state.0.db, id).await?;
        Ok(Reply::ok(&dead_letter_view(d)))
    }

    /// Replay a dead letter (operators)
    ///
    /// Re-enqueues the job once; replaying a letter that is no longer dead changes nothing.
    /// Audited.
    #[oai(
        path = "/operator/dead-letters/:dead_letter_id/replay",
        method = "post",
        operation_id = "operatorReplayDeadLetter"
    )]
    async fn replay(
        &self,
        auth: OperatorAuth,
        dead_letter_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
    ) -> poem::Result<Reply<DeadLetterAction>> {
        let id = self::dead_letter_id(&dead_letter_id.0)?;
        let actor = auth.0.actor();
        key.run_as_operator(&auth.0, &Value::Null, async move |txn| {
            let out = dead_letters::replay(txn, id, &actor, None).await?;
            Ok(Outcome::new(action(id, "replayed", out)))
        })
        .await
    }

    /// Purge a dead letter (operators)
    ///
    /// Drops it for good, with a mandatory reason. Audited.
    #[oai(
        path = "/operator/dead-letters/:dead_letter_id/purge",
        method = "post",
        operation_id = "operatorPurgeDeadLetter"
    )]
    async fn purge(
        &self,
        auth: OperatorAuth,
        dead_letter_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<OperatorAction>,
    ) -> poem::Result<Reply<DeadLetterAction>> {
        let id = self::dead_letter_id(&dead_letter_id.0)?;
        let actor = auth.0.actor();
        let reason = &body.value.reason;
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let out = dead_letters::purge(txn, id, &actor, reason).await?;
            Ok(Outcome::new(action(id, "purged", out)))
        })
        .await
    }

    /// Replay every matching dead letter (operators)
    ///
    /// Every dead letter matching the filter (all of them: page by page, no cap) goes back
    /// on its queue once, each in its own audited transaction; the whole action is audited
    /// once more with its filter and counts. With `dry_run`, only counts and lists. A letter
    /// that fails does not stop the rest (`failed`).
    #[oai(
        path = "/operator/dead-letters/bulk/replay",
        method = "post",
        operation_id = "operatorReplayDeadLetters"
    )]
    async fn bulk_replay(
        &self,
        auth: OperatorAuth,
        /// Optional (UUID): a retry with the same key replays the first answer instead of
        /// acting again.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<BulkDeadLetterRequest>,
    ) -> poem::Result<Reply<BulkDeadLetterResult>> {
        bulk(key, &auth, dead_letters::Action::Replay, body).await
    }

    /// Purge every matching dead letter (operators)
    ///
    /// As the bulk replay, dropping each letter for good instead.
    #[oai(
        path = "/operator/dead-letters/bulk/purge",
        method = "post",
        operation_id = "operatorPurgeDeadLetters"
    )]
    async fn bulk_purge(
        &self,
        auth: OperatorAuth,
        /// Optional (UUID): a retry with the same key replays the first answer instead of
        /// acting again.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<BulkDeadLetterRequest>,
    ) -> poem::Result<Reply<BulkDeadLetterResult>> {
        bulk(key, &auth, dead_letters::Action::Purge, body).await
    }
}

/// The letters are acted on one transaction each before the whole action is audited, in
/// the transaction that keeps its answer for a retry with the same key.
async fn bulk(
    key: OptionalKey<'_>,
    auth: &OperatorAuth,
    action: dead_letters::Action,
    body: JsonBody<BulkDeadLetterRequest>,
) -> poem::Result<Reply<BulkDeadLetterResult>> {
    let b = &body.value;
    let f = &b.filter;
    let input = dead_letters::FilterInput {
        status: None,
        queue: f.queue.clone().map(String::from),
        job_type: f.job_type.clone().map(String::from),
        tenant: f.integration_id.clone().map(String::from),
        merchant: f.merchant_id.clone().map(String::from),
        older_than: f.older_than_secs.as_ref().map(|s| s.0.to_string()),
        error: f.error.as_ref().map(|e| e.to_string()),
    };
    let filter = dead_letters::parse_filter(&input, chrono::Utc::now())?;
    let dry_run = b.dry_run.unwrap_or(false);
    let actor = auth.0.actor();
    let would = match action {
        dead_letters::Action::Replay => "would_replay",
        dead_letters::Action::Purge => "would_purge",
    };
    let db = &key.state().db;
    let (filter, actor) = (&filter, &actor);
    key.run_as_operator_prepared(
        &auth.0,
        &body.json,
        async || {
            let mut listed = vec![];
            let sum =
                dead_letters::bulk_steps(db, filter, action, actor, &b.reason, dry_run, |step| {
                    if listed.len() < BULK_LISTED {
                        let (outcome, error) = match step.outcome(action) {
                            None => (would.to_string(), None),
                            Some((word, error)) => (word.to_string(), error),
                        };
                        listed.push(BulkDeadLetterStep {
                            dead_letter_id: step.letter.id.to_string(),
                            queue: step.letter.queue.clone(),
                            outcome,
                            error,
                        });
                    }
                })
                .await?;
            Ok((sum, listed))
        },
        async move |txn, (sum, listed)| {
            dead_letters::audit_bulk(txn, filter, action, actor, &b.reason, &sum).await?;
            Ok(Outcome::new(BulkDeadLetterResult {
                dry_run: sum.dry_run,
                matched: sum.matched,
                changed: sum.changed,
                unchanged: sum.unchanged,
                failed: sum.failed,
                dead_letters: listed,
            }))
        },
    )
    .await
}
