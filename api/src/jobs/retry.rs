//! What follows a failed attempt: the same attempt later (deferred), the next attempt
//! after the backoff, or the dead letter after the last one. The runtime settles its own
//! jobs' failures here, and `webhook_batch` the attempts it makes on its deliveries' behalf.
use std::time::Duration;

use chrono::Utc;

use super::{JobError, QueuedJob, backoff, context::JobDeps, webhook_batch, webhook_deliver};
use crate::{infra::telemetry::metrics as m, store};

/// How a failed attempt was settled: the `outcome` label of a job's run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settled {
    /// Not an attempt: the same attempt runs again later.
    Deferred,
    Retry,
    Dead,
}

impl Settled {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Settled::Deferred => "deferred",
            Settled::Retry => "retry",
            Settled::Dead => "dead",
        }
    }
}

/// Writes what follows a failed attempt of `env`: the same attempt later (deferred), the
/// next attempt after the backoff, or the dead letter after the last one. Also used for
/// the attempts a `webhook_batch` job makes on its deliveries' behalf.
pub(super) async fn settle_failure(
    deps: &JobDeps,
    env: &QueuedJob,
    failure: JobError,
) -> Result<Settled, String> {
    let cfg = &deps.state.config;
    if let JobError::Deferred(wait) = failure {
        // Not an attempt: the same attempt again later.
        let later = env.deferred();
        later
            .enqueue(&deps.state.queue, wait)
            .await
            .map_err(|e| format!("deferring failed: {e}"))?;
        // What the job waited for may have settled since it looked, and its wake then
        // found no deferred job to move. Looking again now that the job is queued closes
        // that gap: a wake after this enqueue sees the job, and one before it committed
        // its settlement before this look.
        match env.job_type.as_str() {
            webhook_deliver::JOB_TYPE => webhook_deliver::wake_if_unblocked(deps, &later).await,
            webhook_batch::JOB_TYPE => webhook_batch::wake_if_unblocked(deps, &later).await,
            _ => {}
        }
        return Ok(Settled::Deferred);
    }
    let message = failure.to_string();
    let own_wait = match &failure {
        JobError::RetryAfter(_, w) => Some(*w),
        _ => None,
    };
    // A job type with its own schedule keeps its own cap for its infrastructure errors too.
    let cap = match env.job_type.as_str() {
        webhook_deliver::JOB_TYPE => cfg.webhook_max_attempts,
        _ => cfg.job_max_attempts,
    };
    let last =
        matches!(failure, JobError::Permanent(_)) || (own_wait.is_none() && env.attempt >= cap);
    if last {
        return dead_letter(deps, env, &message)
            .await
            .map(|()| Settled::Dead);
    }
    let next = env.next_attempt(&message);
    let wait = own_wait.unwrap_or_else(|| {
        backoff::delay_before_attempt(
            next.attempt,
            Duration::from_millis(cfg.job_backoff_base_ms),
            Duration::from_millis(cfg.job_backoff_max_ms),
        )
    });
    tracing::warn!(error = %message, next_attempt = next.attempt, wait_ms = wait.as_millis() as u64, "job attempt failed; retry scheduled");
    next.enqueue(&deps.state.queue, wait)
        .await
        .map_err(|e| e.to_string())?;
    metrics::counter!(m::JOB_RETRIES, "job_type" => env.job_type.clone()).increment(1);
    Ok(Settled::Retry)
}

async fn dead_letter(deps: &JobDeps, env: &QueuedJob, message: &str) -> Result<(), String> {
    if env.job_type == webhook_deliver::JOB_TYPE {
        webhook_deliver::on_dead_letter(deps, env).await;
    }
    if env.job_type == super::report_run::JOB_TYPE {
        super::report_run::on_dead_letter(deps, env, message).await;
    }
    let history = env.next_attempt(message).errors;
    tracing::error!(error = %message, attempts = env.attempt, "job dead-lettered");
    store::queues::dead_letters::insert_once(
        &deps.state.db,
        store::queues::dead_letters::NewDeadLetter {
            job_id: env.job_id,
            queue: &env.job_type,
            job_type: &env.job_type,
            merchant_id: env.merchant_id,
            payload: env.payload.clone(),
            attempts: i32::try_from(env.attempt).unwrap_or(i32::MAX),
            error_history: serde_json::to_value(&history).unwrap_or_default(),
            last_error: message,
            first_enqueued_at: env.first_enqueued_at,
            dead_at: Utc::now(),
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    metrics::counter!(m::JOB_DEAD_LETTERS, "job_type" => env.job_type.clone()).increment(1);
    Ok(())
}
