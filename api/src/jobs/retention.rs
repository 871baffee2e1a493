//! The retention job: on every worker, every `WALLET_RETENTION_INTERVAL_SECS`, each table
//! that grows with traffic loses what has outlived its use, in batches of
//! `WALLET_RETENTION_BATCH_ROWS` with a pause between them. Safe on any number of workers at
//! once: every batch is one idempotent DELETE. What each keeps, and why:
//!
//! | table | kept |
//! |---|---|
//! | finished jobs | `WALLET_RETENTION_JOBS_DAYS` after they finished |
//! | outbox | until relayed, then the events API's 30 days and one more; on PostgreSQL by whole months (`store::db::partitions`) |
//! | idempotency records | until they expire (`WALLET_IDEMPOTENCY_TTL_HOURS`) |
//! | OTP sessions, QR nonces | a day past expiry unless they paid (then for ever) |
//! | webhook deliveries (settled), attempts | `WALLET_RETENTION_WEBHOOK_DAYS` |
//! | sandbox messages | `WALLET_RETENTION_SANDBOX_MESSAGES_DAYS` |
//! | report runs and their files | until their `expires_at`: `WALLET_REPORT_RETENTION_DAYS` after they were asked for |
//!
//! The ledger, payments and every other money record are never pruned (`store::db::retention`
//! has no way to name them).
//!
//! Each pass first creates the partitions of the months ahead (PostgreSQL), so the history
//! tables always have somewhere to write.
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend};
use tokio::sync::watch;

use crate::{
    config::Config,
    domain::webhooks::event_feed,
    infra::telemetry::metrics as m,
    state::AppState,
    store::{self, db::retention::Table},
};

/// Room for other writers between two batches (on SQLite, the one writer's turn).
const PAUSE: Duration = Duration::from_millis(20);

/// How long each table's rows are kept.
pub fn keep(cfg: &Config, table: Table) -> chrono::Duration {
    let days = |d: u32| chrono::Duration::days(i64::from(d));
    match table {
        Table::FinishedJobs => days(cfg.retention_jobs_days),
        Table::OutboxEvents => chrono::Duration::days(event_feed::KEPT_DAYS + 1),
        Table::IdempotencyRecords => chrono::Duration::hours(i64::from(cfg.idempotency_ttl_hours)),
        // A late payment with an expired credential is refused either way; a day lets
        // support still see why.
        Table::OtpSessions | Table::QrNonces => chrono::Duration::days(1),
        Table::WebhookDeliveries | Table::WebhookAttempts => days(cfg.retention_webhook_days),
        Table::SandboxMessages => days(cfg.retention_sandbox_messages_days),
        // Each run carries its own expiry (`WALLET_REPORT_RETENTION_DAYS` when it was asked).
        Table::ReportRuns => chrono::Duration::zero(),
    }
}

/// One pass over every table as of `now`: rows deleted per table. A table whose batch
/// fails is reported and left for the next pass; the others still run.
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> Vec<(Table, Result<u64, String>)> {
    if let Err(e) = partition_upkeep(state, now).await {
        tracing::warn!(error = %e, "partition upkeep failed: the next pass tries again");
    }
    let mut done = Vec::with_capacity(Table::ALL.len());
    for table in Table::ALL {
        done.push((table, prune(state, table, now).await));
    }
    done
}

/// Creates the months ahead that are missing and reports how far ahead they reach.
pub async fn partition_upkeep(state: &AppState, now: DateTime<Utc>) -> Result<(), sea_orm::DbErr> {
    for name in store::db::partitions::ensure(&state.db, now).await? {
        tracing::info!(partition = %name, "partition created");
    }
    if let Some(ahead) = store::db::partitions::months_ahead(&state.db, now).await? {
        metrics::gauge!(m::PARTITION_MONTHS_AHEAD).set(f64::from(ahead));
    }
    Ok(())
}

/// Prunes one table as of `now`, batch after batch until none is full; returns the rows
/// deleted.
pub async fn prune(state: &AppState, table: Table, now: DateTime<Utc>) -> Result<u64, String> {
    let keep = keep(&state.config, table);
    if table == Table::OutboxEvents && state.db.get_database_backend() == DbBackend::Postgres {
        // Whole months, each when its last row is past the window: no row-by-row deletes.
        let n = store::db::partitions::drop_outbox_before(&state.db, now, keep)
            .await
            .map_err(|e| e.to_string())?;
        metrics::counter!(m::RETENTION_DELETED, "table" => table.as_str()).increment(n);
        metrics::gauge!(m::RETENTION_LAST_SUCCESS, "table" => table.as_str())
            .set(Utc::now().timestamp() as f64);
        return Ok(n);
    }
    let limit = state.config.retention_batch_rows;
    let mut total = 0;
    loop {
        let deleted = batch(state, table, now, keep, limit)
            .await
            .map_err(|e| e.to_string())?;
        total += deleted;
        metrics::counter!(m::RETENTION_DELETED, "table" => table.as_str()).increment(deleted);
        if deleted < limit {
            break;
        }
        tokio::time::sleep(PAUSE).await;
    }
    metrics::gauge!(m::RETENTION_LAST_SUCCESS, "table" => table.as_str())
        .set(Utc::now().timestamp() as f64);
    Ok(total)
}

/// One batch in its own write transaction (on SQLite: in the writer's turn, like every
/// other write).
async fn batch(
    state: &AppState,
    table: Table,
    now: DateTime<Utc>,
    keep: chrono::Duration,
    limit: u64,
) -> Result<u64, sea_orm::DbErr> {
    let txn = store::db::begin(&state.db).await?;
    let deleted = store::db::retention::prune_batch(&txn, table, now, keep, limit).await?;
    txn.commit().await?;
    Ok(deleted)
}

pub async fn run_loop(state: AppState, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_secs(state.config.retention_interval_secs);
    loop {
        for (table, done) in run_once(&state, Utc::now()).await {
            match done {
                Ok(0) => {}
                Ok(n) => tracing::info!(table = table.as_str(), deleted = n, "retention"),
                Err(e) => {
                    tracing::warn!(table = table.as_str(), error = %e, "retention pass failed")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}
