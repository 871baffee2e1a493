//! Job `report_run`: makes one report's file from the ledger (docs/accounting.md), reading
//! from the replica where one is configured. A failed database read or write is retried
//! from the start; a report that cannot be made fails at once with `report.failed`, as does
//! one whose job is dead-lettered.
use crate::domain::ledger::reports::{self, RunError};
use crate::domain::outbox::job_requests::ReportPayload;
use crate::jobs::{context::JobDeps, queued::QueuedJob};

pub use crate::domain::outbox::job_requests::REPORT_RUN as JOB_TYPE;

/// How an attempt ended short of success (the runtime maps it onto its retry rules).
#[derive(Debug)]
pub enum Failure {
    /// Try again later.
    Retryable(String),
    /// Trying again cannot help.
    Permanent(String),
}

fn payload(env: &QueuedJob) -> Result<ReportPayload, Failure> {
    serde_json::from_value(env.payload.clone())
        .map_err(|e| Failure::Permanent(format!("undecodable report_run payload: {e}")))
}

pub async fn run(deps: &JobDeps, env: &QueuedJob) -> Result<(), Failure> {
    let p = payload(env)?;
    let read = deps.state.lagging().await;
    reports::execute(&deps.state.db, &read.db, p.report_id)
        .await
        .map_err(|e| match e {
            RunError::Db(e) => Failure::Retryable(format!("report {}: {e}", p.report_id)),
            RunError::Broken(e) => Failure::Permanent(format!("report {}: {e}", p.report_id)),
        })
}

/// The job gave up: the run fails, with `report.failed`.
pub async fn on_dead_letter(deps: &JobDeps, env: &QueuedJob, reason: &str) {
    let Ok(p) = payload(env) else {
        return;
    };
    if let Err(e) = reports::give_up(&deps.state.db, p.report_id, reason).await {
        tracing::warn!(report_id = %p.report_id, error = ?e, "marking a dead-lettered report failed");
    }
}
