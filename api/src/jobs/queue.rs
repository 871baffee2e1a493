//! The apalis storage behind the queues: PostgreSQL (schema `apalis`, beside the service's
//! tables) in production, and the same SQLite file as the service's data in embedded mode.
//! Sharing the database lets the outbox relay insert queue rows in the transaction that
//! marks the outbox rows relayed: a row is enqueued exactly once.
use std::time::Duration;

use apalis::prelude::TaskBuilder;
use sea_orm::{
    DatabaseConnection, DbBackend,
    sqlx::{self, PgPool, SqlitePool},
};

use super::JobEnvelope;
use crate::{
    domain::job_requests::{SMS_SEND, WEBHOOK_BATCH, WEBHOOK_DELIVER},
    error::{ApiError, Subsystem},
};

/// One apalis queue per job type.
pub const QUEUES: &[&str] = &[SMS_SEND, WEBHOOK_DELIVER, WEBHOOK_BATCH];

/// apalis' own re-runs, for infrastructure failures only (our retry schedule could not be
/// written); the job's real attempts are counted in the envelope.
pub const INFRA_ATTEMPTS: usize = 5;

#[derive(Clone)]
pub enum Queue {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable {
        subsystem: Subsystem::Queue,
        cause: e.to_string(),
    }
}

impl Queue {
    pub fn from_db(db: &DatabaseConnection) -> Queue {
        match db.get_database_backend() {
            DbBackend::Postgres => Queue::Postgres(db.get_postgres_connection_pool().clone()),
            _ => Queue::Sqlite(db.get_sqlite_connection_pool().clone()),
        }
    }

    /// Creates apalis' tables. On SQLite its setup also switches `synchronous` off for the
    /// connection it runs on, so it gets a throwaway connection of its own and the
    /// service's pool keeps its durable settings.
    pub async fn setup(&self) -> anyhow::Result<()> {
        match self {
            Queue::Sqlite(pool) => {
                let opts = (*pool.connect_options()).clone();
                let one = sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(opts)
                    .await?;
                apalis_sqlite::SqliteStorage::setup(&one).await?;
                one.close().await;
            }
            Queue::Postgres(pool) => apalis_postgres::PostgresStorage::setup(pool).await?,
        }
        Ok(())
    }

    pub fn task(env: &JobEnvelope, run_after: Duration) -> apalis_core::task::Task<Vec<u8>> {
        let bytes = serde_json::to_vec(env).expect("job envelopes serialise");
        TaskBuilder::new(bytes)
            .max_attempts(INFRA_ATTEMPTS)
            .run_after(run_after)
            .idempotency_key(env.idempotency_key())
            .build()
    }

    /// Enqueues one attempt (a retry or a replay). A second push of the same attempt is a
    /// no-op on both backends.
    pub async fn push(&self, env: &JobEnvelope, run_after: Duration) -> Result<(), ApiError> {
        let task = Self::task(env, run_after);
        match self {
            Queue::Sqlite(pool) => {
                let _turn = crate::store::db::write_turn(pool)
                    .await
                    .map_err(unavailable)?;
                let mut tx = pool.begin().await.map_err(unavailable)?;
                apalis_sqlite::queries::push_tasks(&mut *tx, &env.job_type, &[task])
                    .await
                    .map_err(unavailable)?;
                tx.commit().await.map_err(unavailable)
            }
            Queue::Postgres(pool) => {
                let mut tx = pool.begin().await.map_err(unavailable)?;
                match apalis_postgres::queries::push_tasks(&mut *tx, &env.job_type, vec![task])
                    .await
                {
                    Ok(()) => tx.commit().await.map_err(unavailable),
                    // apalis-postgres reports a duplicate idempotency key as an error.
                    Err(e) if e.to_string().contains("idx_jobs_idempotency_key") => Ok(()),
                    Err(e) => Err(unavailable(e)),
                }
            }
        }
    }

    /// Moves the deferred (put off, not yet due: see `JobError::Deferred`) jobs of
    /// `job_type` whose envelope contains `needle` to now: a job waiting for something
    /// that has just happened runs at once instead of at its next look. A retry waiting
    /// out its backoff is not deferred and keeps its time. Returns how many were moved.
    pub async fn run_deferred_now(&self, job_type: &str, needle: &str) -> Result<u64, ApiError> {
        // An envelope ends with its deferral count (`JobEnvelope` field order).
        let undeferred = b"\"deferrals\":0}";
        match self {
            Queue::Sqlite(pool) => {
                let _turn = crate::store::db::write_turn(pool)
                    .await
                    .map_err(unavailable)?;
                sqlx::query(
                    "UPDATE Jobs SET run_at = strftime('%s', 'now') \
                     WHERE job_type = ?1 AND status = 'Pending' \
                     AND run_at > strftime('%s', 'now') AND instr(job, ?2) > 0 \
                     AND instr(job, ?3) = 0",
                )
                .bind(job_type)
                .bind(needle.as_bytes())
                .bind(&undeferred[..])
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
            }
            Queue::Postgres(pool) => sqlx::query(
                "UPDATE apalis.jobs SET run_at = now() \
                 WHERE job_type = $1 AND status = 'Pending' \
                 AND run_at > now() AND position($2::bytea IN job) > 0 \
                 AND position($3::bytea IN job) = 0",
            )
            .bind(job_type)
            .bind(needle.as_bytes())
            .bind(&undeferred[..])
            .execute(pool)
            .await
            .map(|r| r.rows_affected()),
        }
        .map_err(unavailable)
    }

    /// Returns to the queue the jobs held by `worker`, an incarnation of one of this
    /// process's queue workers that has failed and been replaced. Its jobs' futures ended
    /// with it (apalis runs them inside the worker's stream), so nothing runs them any
    /// more; left alone they would wait out the dead-worker timeout (three missed
    /// heartbeats, a minute by default) before another worker took them. Counted as an
    /// attempt, as apalis counts a dead worker's.
    pub async fn hand_back(&self, worker: &str) -> Result<u64, ApiError> {
        const RESULT: &str =
            r#"{"Err": "Re-enqueued: the worker holding it failed and was restarted."}"#;
        match self {
            Queue::Sqlite(pool) => {
                let _turn = crate::store::db::write_turn(pool)
                    .await
                    .map_err(unavailable)?;
                sqlx::query(
                    "UPDATE Jobs SET status = 'Pending', done_at = NULL, lock_by = NULL, \
                     lock_at = NULL, attempts = attempts + 1, last_result = ?2 \
                     WHERE lock_by = ?1 AND status IN ('Running', 'Queued')",
                )
                .bind(worker)
                .bind(RESULT)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
            }
            Queue::Postgres(pool) => sqlx::query(
                "UPDATE apalis.jobs SET status = 'Pending', done_at = NULL, lock_by = NULL, \
                 lock_at = NULL, attempts = attempts + 1, last_result = $2::jsonb \
                 WHERE lock_by = $1 AND status IN ('Running', 'Queued')",
            )
            .bind(worker)
            .bind(RESULT)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()),
        }
        .map_err(unavailable)
    }

    pub async fn ping(&self) -> Result<(), ApiError> {
        match self {
            Queue::Sqlite(pool) => sqlx::query("SELECT 1 FROM Jobs LIMIT 1")
                .fetch_optional(pool)
                .await
                .map(|_| ()),
            Queue::Postgres(pool) => sqlx::query("SELECT 1 FROM apalis.jobs LIMIT 1")
                .fetch_optional(pool)
                .await
                .map(|_| ()),
        }
        .map_err(unavailable)
    }

    /// Rows per (queue, status), for the queue-depth metrics.
    pub async fn depth(&self) -> Result<Vec<(String, String, i64)>, ApiError> {
        // Both backends count into the same shape; status and queue are plain text columns.
        let rows: Vec<(String, String, i64)> = match self {
            Queue::Sqlite(pool) => {
                sqlx::query_as(
                    "SELECT job_type, status, COUNT(*) AS n FROM Jobs GROUP BY job_type, status",
                )
                .fetch_all(pool)
                .await
            }
            Queue::Postgres(pool) => sqlx::query_as(
                "SELECT job_type, status, COUNT(*) AS n FROM apalis.jobs GROUP BY job_type, status",
            )
            .fetch_all(pool)
            .await,
        }
        .map_err(unavailable)?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run_deferred_now` finds jobs by their envelope's bytes: a delivery's id in the
    /// payload, and a deferral count other than zero at the end.
    #[test]
    fn an_envelope_shows_its_delivery_and_ends_with_its_deferral_count() {
        let delivery = uuid::Uuid::now_v7();
        let env = JobEnvelope::first(
            uuid::Uuid::now_v7(),
            WEBHOOK_DELIVER,
            None,
            serde_json::json!(crate::domain::job_requests::DeliveryPayload {
                delivery_id: delivery,
                series: 0
            }),
            chrono::Utc::now(),
        );
        let text = |e: &JobEnvelope| String::from_utf8(serde_json::to_vec(e).unwrap()).unwrap();
        assert!(text(&env).contains(&format!("\"delivery_id\":\"{delivery}\"")));
        assert!(text(&env).ends_with("\"deferrals\":0}"));
        let later = env.deferred();
        assert!(text(&later).ends_with("\"deferrals\":1}"));
        assert!(!text(&later).contains("\"deferrals\":0}"));
    }
}
