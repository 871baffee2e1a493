//! Background jobs on apalis: one queue per job type, fed only by the outbox relay, so a
//! job exists if and only if the transaction that asked for it committed.
//!
//! Retries are ours, not apalis': a failed attempt schedules the next one as a new
//! persisted task with a `run_after` (exponential backoff with jitter, surviving restarts),
//! and the last failed attempt writes the job with its whole error history to the
//! dead-letter table. Timeouts and panics are caught inside the handler so apalis never
//! leaves a row stuck as Running.
pub mod backoff;
pub mod context;
pub mod poll;
pub mod queued;
pub mod relay;
pub mod report_run;
pub mod retention;
pub mod retry;
pub mod runtime;
pub mod sms;
pub mod sms_send;
pub mod snapshots;
pub mod webhook_batch;
pub mod webhook_deliver;

pub use queued::QueuedJob;
pub use runtime::Runtime;

/// Why an attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Another attempt may succeed.
    #[error("{0}")]
    Retryable(String),
    /// No attempt will succeed: dead-letter now.
    #[error("{0}")]
    Permanent(String),
    /// Another attempt may succeed after this wait (the job keeps its own schedule and
    /// decides itself when it has had its last attempt).
    #[error("{0}")]
    RetryAfter(String, std::time::Duration),
    /// Not attempted: something must happen first (an earlier event of the resource is
    /// still being delivered). Look again after the wait; no attempt is used up.
    #[error("deferred")]
    Deferred(std::time::Duration),
}
