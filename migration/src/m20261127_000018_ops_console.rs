//! Indexes behind the operations console and the operator CLI, so each filter is served
//! by an index range instead of a scan that grows with history (checked at 100,000 dead
//! letters in `api/src/store/queues/dead_letters.rs`'s notes):
//! - dead letters, newest first (`id` is a UUIDv7 taken when the job died, so an age
//!   filter is an `id` range): by status alone, or status with queue, job type or
//!   merchant; the counts per queue read `(status, queue, id)` only;
//! - the error-text filter, on PostgreSQL, by a trigram index (`pg_trgm`, a trusted
//!   extension the database owner may create);
//! - the audit log by operator, action or target, newest first (its time filter is an
//!   `id` range too);
//! - a webhook endpoint's recent attempts, for its success rate and latency.
use sea_orm_migration::prelude::*;

use crate::{drop_idx, idx};

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEXES: &[(&str, &str, &[&str])] = &[
    (
        "ix_dead_letters_status_id",
        "dead_letters",
        &["status", "id"],
    ),
    (
        "ix_dead_letters_status_queue",
        "dead_letters",
        &["status", "queue", "id"],
    ),
    (
        "ix_dead_letters_status_job_type",
        "dead_letters",
        &["status", "job_type", "id"],
    ),
    (
        "ix_dead_letters_status_merchant",
        "dead_letters",
        &["status", "merchant_id", "id"],
    ),
    ("ix_audit_actor", "operator_audit_log", &["actor", "id"]),
    ("ix_audit_action", "operator_audit_log", &["action", "id"]),
    (
        "ix_audit_target",
        "operator_audit_log",
        &["target_id", "id"],
    ),
    (
        "ix_webhook_attempts_subscription",
        "webhook_attempts",
        &["subscription_id", "started_at"],
    ),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, cols) in INDEXES {
            m.create_index(idx(name, table, cols)).await?;
        }
        if m.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            let db = m.get_connection();
            db.execute_unprepared("CREATE EXTENSION IF NOT EXISTS pg_trgm")
                .await?;
            db.execute_unprepared(
                "CREATE INDEX ix_dead_letters_error_trgm ON dead_letters \
                 USING gin (lower(last_error) gin_trgm_ops)",
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        if m.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            m.get_connection()
                .execute_unprepared("DROP INDEX IF EXISTS ix_dead_letters_error_trgm")
                .await?;
        }
        for (name, table, _) in INDEXES {
            m.drop_index(drop_idx(name, table)).await?;
        }
        Ok(())
    }
}
