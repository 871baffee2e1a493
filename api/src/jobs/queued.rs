use std::time::Duration;

use apalis::prelude::TaskBuilder;
use apalis_core::task::Task;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{error::ApiError, store::queues::job_queue::Queue};

/// apalis' own re-runs, for infrastructure failures only (our retry schedule could not be
/// written); the job's real attempts are counted in the `QueuedJob`.
pub const INFRA_ATTEMPTS: usize = 5;

/// What a queue carries: the job's payload plus the bookkeeping that makes retries,
/// dead letters and replays work without apalis' in-memory retry state.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct QueuedJob {
    /// Stable across attempts: the outbox `event_id` that created the job.
    pub job_id: Uuid,
    pub job_type: String,
    pub merchant_id: Option<Uuid>,
    pub payload: Value,
    /// 1 on the first run.
    pub attempt: u32,
    pub first_enqueued_at: DateTime<Utc>,
    /// Every failed attempt so far, oldest first.
    pub errors: Vec<AttemptError>,
    /// Set on a replay from the dead-letter store: each replay gets its own number so it
    /// is enqueued once, however often the replay command is repeated.
    #[serde(default)]
    pub replay: u32,
    /// How often this attempt was put off (see `JobError::Deferred`).
    #[serde(default)]
    pub deferrals: u32,
    /// The request the job descends from, and the trace its run continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::infra::current_request::Origin>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttemptError {
    pub attempt: u32,
    pub at: DateTime<Utc>,
    pub error: String,
}

impl QueuedJob {
    pub fn first(
        job_id: Uuid,
        job_type: &str,
        merchant_id: Option<Uuid>,
        payload: Value,
        enqueued_at: DateTime<Utc>,
    ) -> Self {
        QueuedJob {
            job_id,
            job_type: job_type.to_string(),
            merchant_id,
            payload,
            attempt: 1,
            first_enqueued_at: enqueued_at,
            errors: vec![],
            replay: 0,
            deferrals: 0,
            origin: None,
        }
    }

    /// The job as descending from the request `request_id` (and its trace).
    pub fn descending_from(
        mut self,
        request_id: Option<&String>,
        traceparent: Option<&String>,
    ) -> Self {
        self.origin = request_id.map(|id| crate::infra::current_request::Origin {
            request_id: id.clone(),
            traceparent: traceparent.cloned(),
        });
        self
    }

    /// The queued job of the next attempt, carrying this attempt's error.
    pub fn next_attempt(&self, error: &str) -> Self {
        let mut next = self.clone();
        next.errors.push(AttemptError {
            attempt: self.attempt,
            at: Utc::now(),
            error: error.to_string(),
        });
        next.attempt += 1;
        next.deferrals = 0;
        next
    }

    /// The same attempt, put off once more.
    pub fn deferred(&self) -> Self {
        let mut next = self.clone();
        next.deferrals += 1;
        next
    }

    /// One queue row per (job, replay, attempt): a relay or a retry scheduled twice
    /// enqueues once.
    pub fn idempotency_key(&self) -> String {
        if self.deferrals == 0 {
            format!("{}:{}:{}", self.job_id, self.replay, self.attempt)
        } else {
            format!(
                "{}:{}:{}:d{}",
                self.job_id, self.replay, self.attempt, self.deferrals
            )
        }
    }

    /// Enqueues this attempt, due after `run_after` (a retry or a replay). A second push of
    /// the same attempt is a no-op.
    pub async fn enqueue(&self, queue: &Queue, run_after: Duration) -> Result<(), ApiError> {
        queue.push(&self.job_type, self.task(run_after)).await
    }

    /// This attempt as a queue task, due after `run_after`.
    pub fn task(&self, run_after: Duration) -> Task<Vec<u8>> {
        let bytes = serde_json::to_vec(self).expect("queued jobs serialise");
        TaskBuilder::new(bytes)
            .max_attempts(INFRA_ATTEMPTS)
            .run_after(run_after)
            .idempotency_key(self.idempotency_key())
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run_deferred_now` finds jobs by their queued bytes: a delivery's id in the
    /// payload, and a deferral count other than zero at the end.
    #[test]
    fn a_queued_job_shows_its_delivery_and_ends_with_its_deferral_count() {
        let delivery = uuid::Uuid::now_v7();
        let env = QueuedJob::first(
            uuid::Uuid::now_v7(),
            crate::domain::outbox::job_requests::WEBHOOK_DELIVER,
            None,
            serde_json::json!(crate::domain::outbox::job_requests::DeliveryPayload {
                delivery_id: delivery,
                series: 0
            }),
            chrono::Utc::now(),
        );
        let text = |e: &QueuedJob| String::from_utf8(serde_json::to_vec(e).unwrap()).unwrap();
        assert!(text(&env).contains(&format!("\"delivery_id\":\"{delivery}\"")));
        assert!(text(&env).ends_with("\"deferrals\":0}"));
        let later = env.deferred();
        assert!(text(&later).ends_with("\"deferrals\":1}"));
        assert!(!text(&later).contains("\"deferrals\":0}"));
    }
}
