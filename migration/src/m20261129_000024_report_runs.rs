//! Report runs for a merchant's finance team (docs/accounting.md): what was asked, where the
//! run stands, and the file it made, kept in the database in chunks (in both modes) until
//! `expires_at`, when the retention job removes run and file together.
use sea_orm_migration::{prelude::*, schema::*};

use crate::{drop_idx, idx};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table("report_runs")
                .col(pk_uuid("id"))
                .col(uuid("integration_id"))
                // The merchant the request acted for (its envelope's context).
                .col(uuid("merchant_id"))
                // liability_rollforward | liability_aging | dormant_wallets
                .col(string_len("kind", 32))
                // csv | jsonl
                .col(string_len("format", 8))
                // What was asked: dates, timezone, the merchant filter, as validated.
                .col(json("parameters"))
                // The merchants the key could read when it asked: the run reads no other.
                .col(json("merchant_ids"))
                .col(string_len("status", 16))
                .col(big_integer_null("row_count"))
                .col(big_integer_null("byte_size"))
                .col(string_len_null("sha256", 64))
                .col(string_null("error"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone_null("started_at"))
                .col(timestamp_with_time_zone_null("finished_at"))
                .col(timestamp_with_time_zone("expires_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_report_runs_integration",
            "report_runs",
            &["integration_id", "id"],
        ))
        .await?;
        m.create_index(idx("ix_report_runs_expiry", "report_runs", &["expires_at"]))
            .await?;
        m.create_table(
            Table::create()
                .table("report_chunks")
                .col(uuid("report_id"))
                .col(integer("seq"))
                .col(blob("data"))
                .primary_key(Index::create().col("report_id").col("seq"))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(Alias::new("report_chunks")).to_owned())
            .await?;
        m.drop_index(drop_idx("ix_report_runs_expiry", "report_runs"))
            .await?;
        m.drop_index(drop_idx("ix_report_runs_integration", "report_runs"))
            .await?;
        m.drop_table(Table::drop().table(Alias::new("report_runs")).to_owned())
            .await
    }
}
