//! The outbox relay's one transaction: claim committed outbox rows, insert the queue rows
//! they ask for (apalis' tables live in the same database), mark them relayed, commit.
//! Raw SQL because apalis' insert needs the sqlx transaction itself.
use apalis_core::task::Task;
use chrono::{DateTime, Utc};
use sea_orm::{
    DatabaseConnection, DbBackend,
    sqlx::{self, Row},
};
use serde_json::Value;
use uuid::Uuid;

#[derive(Clone, Debug)]
pub struct PendingRow {
    pub id: i64,
    pub event_id: Uuid,
    pub kind: String,
    pub topic: String,
    pub merchant_id: Option<Uuid>,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
}

const SELECT_PG: &str = "SELECT id, event_id, kind, topic, merchant_id, payload, created_at \
     FROM outbox WHERE relayed_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";
const SELECT_SQLITE: &str = "SELECT id, event_id, kind, topic, merchant_id, payload, created_at \
     FROM outbox WHERE relayed_at IS NULL ORDER BY id LIMIT ?";

/// Relays up to `limit` rows; `to_task` names the queue and task for a row that is a job.
/// Returns the rows relayed.
pub async fn relay_batch<F>(
    db: &DatabaseConnection,
    limit: i64,
    to_task: F,
) -> anyhow::Result<Vec<PendingRow>>
where
    F: Fn(&PendingRow) -> Option<(String, Task<Vec<u8>>)>,
{
    let now = Utc::now();
    match db.get_database_backend() {
        DbBackend::Postgres => {
            let pool = db.get_postgres_connection_pool();
            let mut tx = pool.begin().await?;
            let rows = sqlx::query(SELECT_PG)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            let rows: Vec<PendingRow> = rows
                .iter()
                .map(|r| {
                    Ok(PendingRow {
                        id: r.try_get("id")?,
                        event_id: r.try_get("event_id")?,
                        kind: r.try_get("kind")?,
                        topic: r.try_get("topic")?,
                        merchant_id: r.try_get("merchant_id")?,
                        payload: r.try_get("payload")?,
                        created_at: r.try_get("created_at")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()?;
            if rows.is_empty() {
                return Ok(rows);
            }
            for (queue, tasks) in group(&rows, &to_task) {
                apalis_postgres::queries::push_tasks(&mut *tx, &queue, tasks).await?;
            }
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            sqlx::query("UPDATE outbox SET relayed_at = $1 WHERE id = ANY($2)")
                .bind(now)
                .bind(&ids)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(rows)
        }
        _ => {
            let pool = db.get_sqlite_connection_pool();
            // IMMEDIATE: take the write lock up front instead of failing to upgrade later.
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            let rows = sqlx::query(SELECT_SQLITE)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            let rows: Vec<PendingRow> = rows
                .iter()
                .map(|r| {
                    let payload: String = r.try_get("payload")?;
                    Ok(PendingRow {
                        id: r.try_get("id")?,
                        event_id: r.try_get("event_id")?,
                        kind: r.try_get("kind")?,
                        topic: r.try_get("topic")?,
                        merchant_id: r.try_get("merchant_id")?,
                        payload: serde_json::from_str(&payload)
                            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                        created_at: r.try_get("created_at")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()?;
            if rows.is_empty() {
                return Ok(rows);
            }
            for (queue, tasks) in group(&rows, &to_task) {
                apalis_sqlite::queries::push_tasks(&mut *tx, &queue, &tasks).await?;
            }
            let placeholders = vec!["?"; rows.len()].join(",");
            let sql = format!("UPDATE outbox SET relayed_at = ? WHERE id IN ({placeholders})");
            // Only placeholders are interpolated, never values.
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now);
            for r in &rows {
                q = q.bind(r.id);
            }
            q.execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(rows)
        }
    }
}

fn group<F>(rows: &[PendingRow], to_task: &F) -> Vec<(String, Vec<Task<Vec<u8>>>)>
where
    F: Fn(&PendingRow) -> Option<(String, Task<Vec<u8>>)>,
{
    let mut out: Vec<(String, Vec<Task<Vec<u8>>>)> = vec![];
    for (queue, task) in rows.iter().filter_map(to_task) {
        match out.iter_mut().find(|(q, _)| *q == queue) {
            Some((_, v)) => v.push(task),
            None => out.push((queue, vec![task])),
        }
    }
    out
}
