//! `wallet-worker dlq`: drain the dead-letter store from a shell. Reads filters with
//! `domain::operators::dead_letters::parse_filter` and acts through its `replay`, `purge` and `bulk`,
//! as the console and the operator HTTP API do.
use crate::store::Db;
use chrono::{SecondsFormat, Utc};
use clap::{Args, Subcommand};
use entities::{dead_letter, dead_letter::DeadLetterStatus};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Failure, table};
use crate::{
    domain::operators::dead_letters::{self, Action, BulkSummary, FilterInput, Outcome, Step},
    infra::stdout::line,
    store,
};

#[derive(Args, Clone, Default, Debug)]
pub struct FilterArgs {
    /// sms_send, webhook_deliver, webhook_batch or report_run.
    #[arg(long)]
    pub queue: Option<String>,
    /// sms_send, webhook_deliver, webhook_batch or report_run.
    #[arg(long)]
    pub job_type: Option<String>,
    /// Only letters of the merchants linked to this integration (a platform tenant).
    #[arg(long)]
    pub tenant: Option<String>,
    #[arg(long)]
    pub merchant: Option<String>,
    /// Only letters dead for at least this long: 90s, 15m, 2h, 7d.
    #[arg(long)]
    pub older_than: Option<String>,
    /// Only letters whose last error contains this text (any case).
    #[arg(long)]
    pub error: Option<String>,
}

impl FilterArgs {
    fn input(&self, status: Option<String>) -> FilterInput {
        FilterInput {
            status,
            queue: self.queue.clone(),
            job_type: self.job_type.clone(),
            tenant: self.tenant.clone(),
            merchant: self.merchant.clone(),
            older_than: self.older_than.clone(),
            error: self.error.clone(),
        }
    }
}

#[derive(Args, Clone, Debug)]
pub struct BulkArgs {
    /// One dead letter.
    pub id: Option<Uuid>,
    /// Every dead letter matching the filters, however many (page by page).
    #[arg(long, conflicts_with = "id")]
    pub all: bool,
    /// Why (kept in the audit log). Required.
    #[arg(long)]
    pub reason: String,
    /// List what would be acted on and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// JSON Lines: one object per letter, then one `{"summary": ...}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Dlq {
    /// Dead letters, newest first.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// dead (default), replayed or purged.
        #[arg(long)]
        status: Option<String>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: u64,
        /// The next page: letters older than this id (printed as `next_before`).
        #[arg(long)]
        before: Option<Uuid>,
        /// One object: `{"dead_letters": [...], "next_before": id or null}`.
        #[arg(long)]
        json: bool,
    },
    /// Dead letters still dead, per queue.
    Stats {
        /// One object: `{"queues": [{"queue", "dead"}], "total"}`.
        #[arg(long)]
        json: bool,
    },
    /// One dead letter: every attempt with its error, and its payload (secrets redacted).
    Show {
        id: Uuid,
        #[arg(long)]
        json: bool,
    },
    /// Put one dead letter, or every one matching (`--all`), back on its queue.
    Replay(BulkArgs),
    /// Drop one dead letter, or every one matching (`--all`), for good.
    Purge(BulkArgs),
}

fn ts(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The stable JSON of a letter (`--json`); `full` adds its attempts and payload.
pub fn view(d: &dead_letter::Model, full: bool) -> Value {
    let mut v = json!({
        "id": d.id, "job_id": d.job_id, "queue": d.queue, "job_type": d.job_type,
        "merchant_id": d.merchant_id, "status": d.status.as_str(), "attempts": d.attempts,
        "last_error": d.last_error, "first_enqueued_at": d.first_enqueued_at, "dead_at": d.dead_at,
        "replay_count": d.replay_count, "replayed_at": d.replayed_at,
        "purged_at": d.purged_at, "purge_reason": d.purge_reason,
    });
    if full {
        v["error_history"] = d.error_history.clone();
        v["payload"] = dead_letters::redact(&d.payload);
    }
    v
}

fn row(d: &dead_letter::Model) -> Vec<String> {
    vec![
        d.id.to_string(),
        d.queue.clone(),
        d.merchant_id.map(|m| m.to_string()).unwrap_or_default(),
        d.attempts.to_string(),
        ts(d.dead_at),
        d.status.to_string(),
        d.last_error.clone(),
    ]
}

const COLUMNS: &[&str] = &[
    "ID",
    "QUEUE",
    "MERCHANT",
    "ATTEMPTS",
    "DEAD AT",
    "STATUS",
    "LAST ERROR",
];

pub async fn run(db: &Db, cmd: Dlq) -> Result<(), Failure> {
    match cmd {
        Dlq::List {
            filter,
            status,
            limit,
            before,
            json,
        } => list(db, &filter, status, limit, before, json).await,
        Dlq::Stats { json } => stats(db, json).await,
        Dlq::Show { id, json } => show(db, id, json).await,
        Dlq::Replay(args) => act(db, Action::Replay, args).await,
        Dlq::Purge(args) => act(db, Action::Purge, args).await,
    }
}

async fn list(
    db: &Db,
    filter: &FilterArgs,
    status: Option<String>,
    limit: u64,
    before: Option<Uuid>,
    json: bool,
) -> Result<(), Failure> {
    if !(1..=1000).contains(&limit) {
        return Err(Failure::Usage("--limit: from 1 to 1000".into()));
    }
    let f = dead_letters::parse_filter(&filter.input(status), Utc::now())?;
    let rows = store::queues::dead_letters::list(db, &f, before, limit + 1).await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    let next = more.then(|| rows.last().map(|d| d.id)).flatten();
    if json {
        line(
            &json!({
                "dead_letters": rows.iter().map(|d| view(d, false)).collect::<Vec<_>>(),
                "next_before": next,
            })
            .to_string(),
        )?;
        return Ok(());
    }
    let cells: Vec<Vec<String>> = rows.iter().map(row).collect();
    line(&table::render(COLUMNS, &cells))?;
    match next {
        Some(id) => line(&format!(
            "{} shown; more match: add --before {id}",
            rows.len()
        ))?,
        None => line(&format!("{} shown", rows.len()))?,
    }
    Ok(())
}

async fn stats(db: &Db, json: bool) -> Result<(), Failure> {
    let per_queue = store::queues::dead_letters::dead_per_queue(db).await?;
    let total: i64 = per_queue.iter().map(|(_, n)| n).sum();
    if json {
        let queues: Vec<Value> = per_queue
            .iter()
            .map(|(q, n)| json!({"queue": q, "dead": n}))
            .collect();
        line(&json!({"queues": queues, "total": total}).to_string())?;
        return Ok(());
    }
    let mut rows: Vec<Vec<String>> = per_queue
        .iter()
        .map(|(q, n)| vec![q.clone(), n.to_string()])
        .collect();
    rows.push(vec!["total".into(), total.to_string()]);
    line(&table::render(&["QUEUE", "DEAD"], &rows))?;
    Ok(())
}

async fn show(db: &Db, id: Uuid, json: bool) -> Result<(), Failure> {
    let d = store::queues::dead_letters::find(db, id)
        .await?
        .ok_or_else(|| Failure::Error(format!("no dead letter {id}")))?;
    let v = view(&d, true);
    if json {
        line(&v.to_string())?;
        return Ok(());
    }
    let mut fields = vec![];
    for k in [
        "id",
        "job_id",
        "queue",
        "job_type",
        "merchant_id",
        "status",
        "attempts",
        "first_enqueued_at",
        "dead_at",
        "replay_count",
        "purge_reason",
        "last_error",
    ] {
        let shown = match &v[k] {
            Value::String(s) => s.clone(),
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        fields.push(vec![k.to_string(), shown]);
    }
    line(&table::render(&["FIELD", "VALUE"], &fields))?;
    line("")?;
    let attempts: Vec<Vec<String>> = d
        .error_history
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let text = |k: &str| match &a[k] {
                Value::String(s) => s.clone(),
                Value::Null => "-".into(),
                other => other.to_string(),
            };
            vec![text("attempt"), text("at"), text("error")]
        })
        .collect();
    line(&table::render(&["ATTEMPT", "AT", "ERROR"], &attempts))?;
    line("")?;
    line("payload (secrets redacted):")?;
    line(&serde_json::to_string_pretty(&v["payload"])?)?;
    Ok(())
}

async fn act(db: &Db, action: Action, a: BulkArgs) -> Result<(), Failure> {
    let verb = match action {
        Action::Replay => "replay",
        Action::Purge => "purge",
    };
    let filtered = a.filter.queue.is_some()
        || a.filter.job_type.is_some()
        || a.filter.tenant.is_some()
        || a.filter.merchant.is_some()
        || a.filter.older_than.is_some()
        || a.filter.error.is_some();
    let f = match (a.id, a.all) {
        (Some(_), _) if filtered => {
            return Err(Failure::Usage(format!(
                "name one dead letter id, or --all with filters; not both ({verb})"
            )));
        }
        (Some(_), _) => None,
        (None, true) => Some(dead_letters::parse_filter(
            &a.filter.input(None),
            Utc::now(),
        )?),
        (None, false) => {
            return Err(Failure::Usage(format!(
                "name one dead letter id, or --all with optional filters ({verb})"
            )));
        }
    };
    dead_letters::reason(&a.reason)?;
    let actor = super::actor();
    let mut rows: Vec<Vec<String>> = vec![];
    let mut printed: std::io::Result<()> = Ok(());
    let mut each = |s: Step<'_>| {
        let (outcome, error) = match (s.outcome(action), s.result) {
            (None, _) => (format!("would {verb}"), None),
            // The operator's words for a failure, not the HTTP caller's.
            (Some((word, _)), Some(Err(e))) => (
                word.to_string(),
                Some(super::Failure::of(e).message().to_string()),
            ),
            (Some((word, error)), _) => (word.to_string(), error),
        };
        if a.json {
            let mut v = json!({"id": s.letter.id, "queue": s.letter.queue, "outcome": outcome});
            if let Some(e) = &error {
                v["error"] = json!(e);
            }
            if printed.is_ok() {
                printed = line(&v.to_string());
            }
        } else {
            rows.push(vec![
                s.letter.id.to_string(),
                s.letter.queue.clone(),
                outcome,
                error.unwrap_or_default(),
            ]);
        }
    };
    let summary = match (a.id, f) {
        (Some(id), _) => one(db, action, id, &actor, &a.reason, a.dry_run, &mut each).await?,
        (None, Some(f)) => {
            dead_letters::bulk(db, &f, action, &actor, &a.reason, a.dry_run, &mut each).await?
        }
        (None, None) => unreachable!("refused above"),
    };
    printed?;
    if a.json {
        line(&json!({ "summary": summary }).to_string())?;
    } else {
        if !rows.is_empty() {
            line(&table::render(&["ID", "QUEUE", "OUTCOME", "ERROR"], &rows))?;
        }
        line(&say(verb, &summary))?;
    }
    if summary.failed > 0 {
        return Err(Failure::Partial(format!(
            "{} of {} failed; the rest were done",
            summary.failed, summary.matched
        )));
    }
    Ok(())
}

/// One named letter, through the same domain actions as a bulk one.
async fn one(
    db: &Db,
    action: Action,
    id: Uuid,
    actor: &str,
    why: &str,
    dry_run: bool,
    each: &mut impl FnMut(Step<'_>),
) -> Result<BulkSummary, Failure> {
    let letter = store::queues::dead_letters::find(db, id)
        .await?
        .ok_or_else(|| Failure::Error(format!("no dead letter {id}")))?;
    let mut sum = BulkSummary {
        dry_run,
        matched: 1,
        ..BulkSummary::default()
    };
    if dry_run {
        if letter.status == DeadLetterStatus::Dead {
            each(Step {
                letter: &letter,
                result: None,
            });
        } else {
            sum.matched = 0;
        }
        return Ok(sum);
    }
    let r = dead_letters::act(db, action, id, actor, why).await;
    match &r {
        Ok(Outcome::Done(_)) => sum.changed = 1,
        Ok(Outcome::NotDead(_)) => sum.unchanged = 1,
        // A refused reason is a usage error, not a partial run.
        Err(e) if e.code() == crate::error::ErrorCode::ValidationError => {
            return Err(Failure::from(r.unwrap_err()));
        }
        Err(_) => sum.failed = 1,
    }
    each(Step {
        letter: &letter,
        result: Some(&r),
    });
    Ok(sum)
}

fn say(verb: &str, s: &BulkSummary) -> String {
    if s.dry_run {
        return format!(
            "dry run: {} dead letter(s) match and would {verb}; nothing changed",
            s.matched
        );
    }
    let done = if verb == "replay" {
        "replayed"
    } else {
        "purged"
    };
    format!(
        "{} matched: {} {done}, {} no longer dead (unchanged), {} failed",
        s.matched, s.changed, s.unchanged, s.failed
    )
}
