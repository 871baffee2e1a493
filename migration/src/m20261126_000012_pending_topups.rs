//! A top-up can be requested before its payment settles: the till confirms it against a
//! PENDING settlement reference, the wallet shows it in `pending_topups_minor`, and the
//! settlement's outcome credits it (SETTLED) or drops it (FAILED). A top-up row now has a
//! status: `pending`, `credited` or `failed`. Every existing row was credited.
//!
//! The column stays nullable in the schema (SQLite cannot add a NOT NULL column without a
//! default); the backfill fills every existing row and every insert sets it.
use sea_orm_migration::prelude::*;

use crate::{add_column, drop_column};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        add_column(
            m,
            "topups",
            ColumnDef::new(Alias::new("status")).string().to_owned(),
        )
        .await?;
        m.get_connection()
            .execute_unprepared("UPDATE topups SET status = 'credited'")
            .await
            .map(|_| ())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        drop_column(m, "topups", "status").await
    }
}
