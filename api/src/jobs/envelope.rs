use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// What a queue carries: the job's payload plus the bookkeeping that makes retries,
/// dead letters and replays work without apalis' in-memory retry state.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobEnvelope {
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
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttemptError {
    pub attempt: u32,
    pub at: DateTime<Utc>,
    pub error: String,
}

impl JobEnvelope {
    pub fn first(
        job_id: Uuid,
        job_type: &str,
        merchant_id: Option<Uuid>,
        payload: Value,
        enqueued_at: DateTime<Utc>,
    ) -> Self {
        JobEnvelope {
            job_id,
            job_type: job_type.to_string(),
            merchant_id,
            payload,
            attempt: 1,
            first_enqueued_at: enqueued_at,
            errors: vec![],
            replay: 0,
            deferrals: 0,
        }
    }

    /// The envelope of the next attempt, carrying this attempt's error.
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
}
