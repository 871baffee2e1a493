//! The apalis storage behind the queues: PostgreSQL (schema `apalis`, beside the service's
//! tables) in production, and the same SQLite file as the service's data in embedded mode.
//! Sharing the database lets the outbox relay insert queue rows in the transaction that
//! marks the outbox rows relayed: a row is enqueued exactly once.

use apalis_core::task::Task;
use sea_orm::{
    DatabaseConnection, DbBackend,
    sqlx::{self, PgPool, SqlitePool},
};

use crate::error::{ApiError, Subsystem};

/// A job that may still run: waiting, handed to a worker, running, or failed with attempts
/// left. Also the predicate of the index that counts them (the planner needs the same
/// words to use a partial index).
const LIVE: &str = "(status IN ('Pending', 'Queued', 'Running') OR (status = 'Failed' AND attempts < max_attempts))";

/// A job that will not run again; the predicate of the index retention reads.
pub(crate) const FINISHED: &str =
    "(status IN ('Done', 'Killed') OR (status = 'Failed' AND attempts >= max_attempts))";

/// The service's own indexes on apalis' jobs table, beside apalis' own: one counts live jobs
/// (queue depth), one finds finished jobs by age (retention).
fn indexes(jobs: &str, how: &str) -> [String; 2] {
    [
        format!(
            "CREATE INDEX {how} IF NOT EXISTS wallet_jobs_live ON {jobs} (job_type, status) WHERE {LIVE}"
        ),
        format!(
            "CREATE INDEX {how} IF NOT EXISTS wallet_jobs_finished ON {jobs} (done_at) WHERE {FINISHED}"
        ),
    ]
}

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

    /// Ends the queue's database sessions when they are its own (`WALLET_DATABASE_DIRECT_URL`);
    /// closing a pool the service shares is harmless, it is closed already.
    pub async fn close(&self) {
        let closing = async {
            match self {
                Queue::Sqlite(pool) => pool.close().await,
                Queue::Postgres(pool) => pool.close().await,
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), closing).await;
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
                // The statements are built from constants only.
                for index in indexes("Jobs", "") {
                    sqlx::query(sqlx::AssertSqlSafe(index))
                        .execute(&one)
                        .await?;
                }
                one.close().await;
            }
            Queue::Postgres(pool) => {
                apalis_postgres::PostgresStorage::setup(pool).await?;
                // Built without blocking the queue's writers: this runs while the old
                // release still serves.
                for index in indexes("apalis.jobs", "CONCURRENTLY") {
                    sqlx::query(sqlx::AssertSqlSafe(index))
                        .execute(pool)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Enqueues one task of `job_type` (a retry or a replay). A second push of a task with
    /// the same idempotency key is a no-op on both backends.
    pub async fn push(&self, job_type: &str, task: Task<Vec<u8>>) -> Result<(), ApiError> {
        match self {
            Queue::Sqlite(pool) => {
                let _turn = crate::store::db::write_turn(pool)
                    .await
                    .map_err(unavailable)?;
                let mut tx = pool.begin().await.map_err(unavailable)?;
                apalis_sqlite::queries::push_tasks(&mut *tx, job_type, &[task])
                    .await
                    .map_err(unavailable)?;
                tx.commit().await.map_err(unavailable)
            }
            Queue::Postgres(pool) => {
                let mut tx = pool.begin().await.map_err(unavailable)?;
                match apalis_postgres::queries::push_tasks(&mut *tx, job_type, vec![task]).await {
                    Ok(()) => tx.commit().await.map_err(unavailable),
                    // apalis-postgres reports a duplicate idempotency key as an error.
                    Err(e) if e.to_string().contains("idx_jobs_idempotency_key") => Ok(()),
                    Err(e) => Err(unavailable(e)),
                }
            }
        }
    }

    /// Moves the deferred (put off, not yet due: see `jobs::JobError::Deferred`) jobs of
    /// `job_type` whose queued bytes contain `needle` to now: a job waiting for something
    /// that has just happened runs at once instead of at its next look. A retry waiting
    /// out its backoff is not deferred and keeps its time. Returns how many were moved.
    pub async fn run_deferred_now(&self, job_type: &str, needle: &str) -> Result<u64, ApiError> {
        // A queued job ends with its deferral count (`jobs::QueuedJob` field order).
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

    /// Jobs waiting or running per (job type, status), for the queue-depth gauge. Counted
    /// from the partial index of live jobs, so it costs what is queued, never the history.
    pub async fn depth(&self) -> Result<Vec<(String, String, i64)>, ApiError> {
        // Built from constants only (no input reaches it).
        let sql = |jobs: &str| {
            format!(
                "SELECT job_type, status, COUNT(*) AS n FROM {jobs} WHERE {LIVE} \
                 GROUP BY job_type, status"
            )
        };
        // Both backends count into the same shape; status and queue are plain text columns.
        let rows: Vec<(String, String, i64)> = match self {
            Queue::Sqlite(pool) => {
                sqlx::query_as(sqlx::AssertSqlSafe(sql("Jobs")))
                    .fetch_all(pool)
                    .await
            }
            Queue::Postgres(pool) => {
                sqlx::query_as(sqlx::AssertSqlSafe(sql("apalis.jobs")))
                    .fetch_all(pool)
                    .await
            }
        }
        .map_err(unavailable)?;
        Ok(rows)
    }
}
