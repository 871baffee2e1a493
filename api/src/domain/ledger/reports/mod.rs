//! Report runs (docs/accounting.md): a finance team asks for a report, a job worker runs it
//! from the ledger alone (never posting to it), stores its file, and fires `report.ready`
//! or `report.failed`. The run and its file are kept until `expires_at`.
pub mod aging;
pub mod error;
pub mod file;
pub mod rollforward;

pub use error::RunError;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use chrono_tz::Tz;
use entities::{report_run, report_run::ReportStatus};
use sea_orm::ConnectionTrait;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::domain::credentials::Principal;
use crate::domain::ledger::liability;
use crate::domain::outbox::events::{NewOutbox, OutboxKind};
use crate::domain::outbox::job_requests;
use crate::domain::validate::Errors;
use crate::error::ApiError;
use crate::store;
use file::{FileWriter, Format};

/// The report types a run can make.
pub const LIABILITY_ROLLFORWARD: &str = "liability_rollforward";
pub const LIABILITY_AGING: &str = "liability_aging";
pub const DORMANT_WALLETS: &str = "dormant_wallets";
pub const KINDS: &[&str] = &[LIABILITY_ROLLFORWARD, LIABILITY_AGING, DORMANT_WALLETS];

/// The longest range one roll-forward covers, in days.
pub const MAX_DAYS: i64 = 366;

pub const READY: &str = "report.ready";
pub const FAILED: &str = "report.failed";

/// What was asked, as validated and stored with the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    #[serde(rename = "type")]
    pub kind: String,
    /// A roll-forward's first and last business days.
    #[serde(default)]
    pub from: Option<NaiveDate>,
    #[serde(default)]
    pub to: Option<NaiveDate>,
    /// An aging or dormancy report's business day (as at its end).
    #[serde(default)]
    pub as_of: Option<NaiveDate>,
    pub timezone: String,
    pub merchant_id: Option<Uuid>,
    pub format: String,
}

/// A report as asked, its dates and names well formed.
pub struct Asked<'a> {
    /// One of `KINDS`.
    pub kind: &'a str,
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
    pub as_of: Option<NaiveDate>,
    /// An IANA name; default UTC.
    pub timezone: Option<&'a str>,
    pub merchant_id: Option<Uuid>,
    /// `csv` (default) or `jsonl`.
    pub format: Option<&'a str>,
}

/// Checks a report's parameters against its type: a roll-forward needs `from` and `to`
/// (`from` not after `to`, at most `MAX_DAYS` days), an aging or dormancy report `as_of`;
/// every day named must have ended by the integration's clock (`now`) in `timezone`, which
/// must be an IANA name. Field names are JSON pointers into the request body.
pub fn check(e: &mut Errors, asked: &Asked<'_>, now: DateTime<Utc>) -> Option<Params> {
    let timezone = asked.timezone.unwrap_or("UTC");
    let Ok(tz) = timezone.parse::<Tz>() else {
        e.push(
            "/timezone",
            "invalid",
            "must be an IANA time zone name such as Europe/Berlin",
        );
        return None;
    };
    let format = asked.format.unwrap_or("csv");
    if Format::parse(format).is_none() {
        e.push("/format", "invalid", "must be csv or jsonl");
    }
    let today = now.with_timezone(&tz).date_naive();
    let ended = |e: &mut Errors, field: &str, d: NaiveDate| {
        if d >= today {
            e.push(
                field,
                "not_ended",
                "must be a day that has ended in the report's time zone",
            );
        }
    };
    let required = |e: &mut Errors, field: &str, d: Option<NaiveDate>| {
        if d.is_none() {
            e.push(
                field,
                "required",
                "is required for this report type (YYYY-MM-DD)",
            );
        }
        d
    };
    if asked.kind == LIABILITY_ROLLFORWARD {
        let (from, to) = (
            required(e, "/from", asked.from)?,
            required(e, "/to", asked.to)?,
        );
        if from > to {
            e.push("/from", "after_to", "must not be after to");
        } else if (to - from).num_days() + 1 > MAX_DAYS {
            e.push(
                "/to",
                "out_of_range",
                format!("a report covers at most {MAX_DAYS} days"),
            );
        }
        ended(e, "/to", to);
    } else {
        let as_of = required(e, "/as_of", asked.as_of)?;
        ended(e, "/as_of", as_of);
    }
    Some(Params {
        kind: asked.kind.to_string(),
        from: asked.from.filter(|_| asked.kind == LIABILITY_ROLLFORWARD),
        to: asked.to.filter(|_| asked.kind == LIABILITY_ROLLFORWARD),
        as_of: asked.as_of.filter(|_| asked.kind != LIABILITY_ROLLFORWARD),
        timezone: timezone.to_string(),
        merchant_id: asked.merchant_id,
        format: format.to_string(),
    })
}

/// A report run as callers read it.
#[derive(Clone, Debug)]
pub struct Run {
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub kind: String,
    pub format: String,
    pub status: ReportStatus,
    pub parameters: serde_json::Value,
    pub row_count: Option<i64>,
    pub byte_size: Option<i64>,
    pub sha256: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    /// The merchants the key could read when it asked: the run reads no other.
    pub merchant_ids: Vec<Uuid>,
}

impl From<report_run::Model> for Run {
    fn from(r: report_run::Model) -> Self {
        Run {
            id: r.id,
            merchant_id: r.merchant_id,
            kind: r.kind,
            format: r.format,
            status: r.status,
            parameters: r.parameters,
            row_count: r.row_count,
            byte_size: r.byte_size,
            sha256: r.sha256,
            error: r.error,
            created_at: r.created_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            expires_at: r.expires_at,
            merchant_ids: serde_json::from_value(r.merchant_ids).unwrap_or_default(),
        }
    }
}

impl Run {
    pub fn succeeded(&self) -> bool {
        self.status == ReportStatus::Succeeded
    }

    pub fn status_str(&self) -> &'static str {
        self.status.as_str()
    }

    pub fn format(&self) -> Format {
        Format::parse(&self.format).unwrap_or(Format::Csv)
    }
}

/// Records the run the caller asked for, over the merchants it may read, and asks a worker
/// to run it, in the caller's transaction. `now` is real time: a run's lifetime is the
/// service's, not a test clock's.
pub async fn request<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    acting_merchant: Uuid,
    params: Params,
    retention_days: u32,
    now: DateTime<Utc>,
) -> Result<Run, ApiError> {
    let merchants = liability::readable_merchants(c, p, params.merchant_id).await?;
    let run = report_run::Model {
        id: Uuid::now_v7(),
        integration_id: p.integration_id,
        merchant_id: acting_merchant,
        kind: params.kind.clone(),
        format: params.format.clone(),
        parameters: serde_json::to_value(&params).map_err(ApiError::internal)?,
        merchant_ids: serde_json::to_value(&merchants).map_err(ApiError::internal)?,
        status: ReportStatus::Pending,
        row_count: None,
        byte_size: None,
        sha256: None,
        error: None,
        created_at: now,
        started_at: None,
        finished_at: None,
        expires_at: now + Duration::days(i64::from(retention_days)),
    };
    let run = store::ledger::reports::insert(c, run).await?;
    job_requests::run_report(c, acting_merchant, run.id).await?;
    Ok(run.into())
}

/// Runs report `id`: reads from `read` (the replica where there is one), writes its file
/// and outcome to `write`. A run already finished is left alone, so a replayed job is
/// harmless; a run a dead worker left `running` starts again from nothing.
pub async fn execute<R: ConnectionTrait>(
    write: &crate::store::Db,
    read: &R,
    id: Uuid,
) -> Result<(), RunError> {
    let txn = store::begin(write).await?;
    let started = store::ledger::reports::start(&txn, id, Utc::now()).await?;
    txn.commit().await?;
    let Some(run) = started else {
        return Ok(());
    };
    let run = Run::from(run);
    let job = match job_of(&run) {
        Ok(j) => j,
        Err(e) => return finish_failed(write, &run, &e).await,
    };
    let mut out = FileWriter::new(write, run.id, run.format(), job.columns());
    let wrote = match &job {
        Job::Rollforward(spec) => rollforward::write(read, spec, &mut out).await,
        Job::Aging { merchants, end } => aging::write_aging(read, merchants, *end, &mut out).await,
        Job::Dormant { merchants, end } => {
            aging::write_dormant(read, merchants, *end, &mut out).await
        }
    };
    match wrote {
        Ok(()) => {}
        Err(RunError::Broken(e)) => return finish_failed(write, &run, &e).await,
        Err(e) => return Err(e),
    }
    let written = out.finish().await?;
    let txn = store::begin(write).await?;
    let made = store::ledger::reports::Made {
        rows: written.rows,
        bytes: written.bytes,
        sha256: written.sha256.clone(),
    };
    if store::ledger::reports::succeed(&txn, run.id, made, Utc::now()).await? {
        let event = event(
            &run,
            READY,
            json!({
                "row_count": written.rows,
                "byte_size": written.bytes,
                "sha256": written.sha256,
            }),
        );
        store::outbox::append(&txn, event).await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Marks the run failed with `reason` and fires `report.failed` (once).
pub async fn finish_failed(
    write: &crate::store::Db,
    run: &Run,
    reason: &str,
) -> Result<(), RunError> {
    let txn = store::begin(write).await?;
    if store::ledger::reports::fail(&txn, run.id, reason, Utc::now()).await? {
        store::outbox::append(&txn, event(run, FAILED, json!({"error": reason}))).await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Marks run `id` failed after its job gave up (dead-lettered).
pub async fn give_up(write: &crate::store::Db, id: Uuid, reason: &str) -> Result<(), RunError> {
    match store::ledger::reports::find_any(write, id).await? {
        Some(run) => finish_failed(write, &run.into(), reason).await,
        None => Ok(()),
    }
}

/// What a run makes.
enum Job {
    Rollforward(rollforward::Spec),
    Aging {
        merchants: Vec<Uuid>,
        end: DateTime<Utc>,
    },
    Dormant {
        merchants: Vec<Uuid>,
        end: DateTime<Utc>,
    },
}

impl Job {
    fn columns(&self) -> &'static [&'static str] {
        match self {
            Job::Rollforward(_) => rollforward::COLUMNS,
            Job::Aging { .. } => aging::AGING_COLUMNS,
            Job::Dormant { .. } => aging::DORMANT_COLUMNS,
        }
    }
}

fn job_of(run: &Run) -> Result<Job, String> {
    let params: Params = serde_json::from_value(run.parameters.clone())
        .map_err(|e| format!("stored parameters do not parse: {e}"))?;
    let timezone = params
        .timezone
        .parse::<Tz>()
        .map_err(|_| format!("unknown time zone {}", params.timezone))?;
    let merchants = run.merchant_ids.clone();
    let missing = |what: &str| format!("a {} report without {what}", params.kind);
    let end_of = |d: NaiveDate| rollforward::day_start(timezone, d.succ_opt().unwrap_or(d));
    match params.kind.as_str() {
        LIABILITY_ROLLFORWARD => Ok(Job::Rollforward(rollforward::Spec {
            merchants,
            from: params.from.ok_or_else(|| missing("from"))?,
            to: params.to.ok_or_else(|| missing("to"))?,
            timezone,
        })),
        LIABILITY_AGING => Ok(Job::Aging {
            merchants,
            end: end_of(params.as_of.ok_or_else(|| missing("as_of"))?),
        }),
        DORMANT_WALLETS => Ok(Job::Dormant {
            merchants,
            end: end_of(params.as_of.ok_or_else(|| missing("as_of"))?),
        }),
        other => Err(format!("unknown report type {other}")),
    }
}

/// `report.ready` or `report.failed` for `run`, with what it holds.
fn event(run: &Run, topic: &str, extra: serde_json::Value) -> NewOutbox {
    let mut payload = json!({
        "report_id": run.id.to_string(),
        "type": run.kind,
        "format": run.format,
        "parameters": run.parameters,
        "expires_at": run.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    });
    if let (Some(p), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    NewOutbox {
        kind: OutboxKind::Event,
        topic: topic.into(),
        merchant_id: Some(run.merchant_id),
        resource_type: "report".into(),
        resource_id: run.id.to_string(),
        payload,
        occurred_at: Utc::now(),
    }
}

/// The latest runs acted for a merchant (the operations console).
pub async fn of_merchant<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    limit: u64,
) -> Result<Vec<Run>, ApiError> {
    Ok(store::ledger::reports::of_merchant(c, merchant, limit)
        .await?
        .into_iter()
        .map(Run::from)
        .collect())
}

/// Run `id` whoever asked for it (the operations console).
pub async fn find_any<C: ConnectionTrait>(c: &C, id: Uuid) -> Result<Option<Run>, ApiError> {
    Ok(store::ledger::reports::find_any(c, id)
        .await?
        .map(Run::from))
}

/// Run `id`'s file, piece after piece as it is read: a file of any size is sent holding one
/// piece in memory. A read that fails ends the stream with the error.
pub fn file_stream(
    db: crate::store::Db,
    id: Uuid,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static {
    futures::stream::unfold(Some(0i32), move |seq| {
        let db = db.clone();
        async move {
            let seq = seq?;
            match store::ledger::reports::chunk(&db, id, seq).await {
                Ok(Some(piece)) => Some((Ok(bytes::Bytes::from(piece)), Some(seq + 1))),
                Ok(None) => None,
                Err(e) => Some((Err(std::io::Error::other(e.to_string())), None)),
            }
        }
    })
}

/// Run `id` of the caller's integration, if the key may read it: a merchant key reads the
/// runs asked for its merchant. NOT_FOUND otherwise, as for an id that does not exist.
pub async fn readable<C: ConnectionTrait>(c: &C, p: &Principal, id: Uuid) -> Result<Run, ApiError> {
    let own = liability::reporting_scope(p)?;
    store::ledger::reports::find(c, p.integration_id, id)
        .await?
        .filter(|r| own.is_none_or(|m| m == r.merchant_id))
        .map(Run::from)
        .ok_or_else(|| ApiError::not_found("Report"))
}

/// A page of the runs the key may read, newest first, before run `before`; and whether
/// there are more.
pub async fn page<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    before: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<Run>, bool), ApiError> {
    let own = liability::reporting_scope(p)?;
    let mut rows =
        store::ledger::reports::page(c, p.integration_id, own, before, limit + 1).await?;
    let more = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    Ok((rows.into_iter().map(Run::from).collect(), more))
}
