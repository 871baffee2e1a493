//! The index a wallet's entries are read through also carries what the accounting reads
//! of them (`account_kind`, `amount_minor`), so whether each wallet a window touched held
//! value before it (`store::ledger::balances::holders_delta`), and a wallet's actual money
//! for aging, are read from the index alone: a wallet's entries spread over a year of
//! pages, which the old `(wallet_id, created_at)` index sent every read to one by one.
//! Same columns on both backends, as key columns (SQLite has no `INCLUDE`); the old index
//! is their prefix, so it goes.
use sea_orm_migration::prelude::*;

use crate::{drop_idx, idx, partitions};

#[derive(DeriveMigrationName)]
pub struct Migration;

const NEW: &str = "ix_ledger_entries_wallet_values";
const OLD: &str = "ix_ledger_entries_wallet_time";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx(
            NEW,
            "ledger_entries",
            &["wallet_id", "created_at", "account_kind", "amount_minor"],
        ))
        .await?;
        m.drop_index(drop_idx(OLD, "ledger_entries")).await?;
        partitions::name_partition_indexes(m.get_connection(), "ledger_entries").await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx(OLD, "ledger_entries", &["wallet_id", "created_at"]))
            .await?;
        m.drop_index(drop_idx(NEW, "ledger_entries")).await?;
        partitions::name_partition_indexes(m.get_connection(), "ledger_entries").await
    }
}
