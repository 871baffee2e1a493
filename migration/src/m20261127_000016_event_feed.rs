//! `GET /events` reads a merchant's catalog events newest first: an index on
//! (merchant_id, event_id) over event rows only (job rows never appear in the feed).
use sea_orm_migration::prelude::*;

use crate::drop_idx;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // Partial indexes: PostgreSQL and SQLite both take this statement as written.
        m.get_connection()
            .execute_unprepared(
                "CREATE INDEX ix_outbox_events ON outbox (merchant_id, event_id) WHERE kind = 'event'",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(drop_idx("ix_outbox_events", "outbox")).await
    }
}
