//! The history that grows with every payment, partitioned by month on PostgreSQL (see
//! `partitions`): payments, ledger entries and the outbox. Rows already there stay, as the
//! partition `<table>_p_initial`; nothing is copied. SQLite keeps plain tables.
//!
//! Idempotency records stay one table: the unique index on `(owner, idempotency_key)` is
//! what stops a second execution from committing, and PostgreSQL enforces uniqueness across
//! partitions only for keys that include the partition key. They live a day and go in
//! small batches (`store::retention`).
use sea_orm::{ConnectionTrait, DbBackend};
use sea_orm_migration::prelude::*;

use crate::partitions::{self, ALL};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let c = m.get_connection();
        if c.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let now = chrono::Utc::now();
        for p in ALL {
            partitions::convert(c, p, now).await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let c = m.get_connection();
        if c.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        for p in ALL {
            // Every primary key was `id` before.
            partitions::unconvert(c, p, &["id"]).await?;
        }
        Ok(())
    }
}
