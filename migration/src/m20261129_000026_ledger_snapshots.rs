//! Snapshots of customer value (docs/accounting.md, "Snapshots"): per merchant, currency
//! and UTC hour, what each posting kind moved on each value-class account kind, and the
//! closing balance of each class with the number of wallets holding any. Rows exist only
//! for hours in which something moved; `ledger_snapshot_marks` says up to which day a merchant's
//! rows are complete. Everything here is rebuilt from the ledger alone: deleting a
//! merchant's rows and mark loses nothing.
use sea_orm_migration::{prelude::*, schema::*};

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
                .table("ledger_hour_movements")
                .col(uuid("merchant_id"))
                // The hour's first instant.
                .col(timestamp_with_time_zone("hour"))
                .col(string_len("currency", 3))
                .col(string_len("account_kind", 32))
                .col(string_len("posting_kind", 32))
                .col(big_integer("amount_minor"))
                .primary_key(
                    Index::create()
                        .col("merchant_id")
                        .col("hour")
                        .col("currency")
                        .col("account_kind")
                        .col("posting_kind"),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table("ledger_hour_closings")
                .col(uuid("merchant_id"))
                .col(string_len("currency", 3))
                // The hour's first instant.
                .col(timestamp_with_time_zone("hour"))
                .col(big_integer("actual_minor"))
                .col(big_integer("promo_released_minor"))
                .col(big_integer("promo_locked_minor"))
                .col(big_integer("escrow_minor"))
                .col(big_integer("pending_topup_minor"))
                .col(big_integer("wallets_holding"))
                // The latest hour before an instant is one index probe.
                .primary_key(
                    Index::create()
                        .col("merchant_id")
                        .col("currency")
                        .col("hour"),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table("ledger_snapshot_marks")
                .col(pk_uuid("merchant_id"))
                // The last UTC day whose rows are complete; none yet while NULL.
                .col(date_null("built_through"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            "ledger_snapshot_marks",
            "ledger_hour_closings",
            "ledger_hour_movements",
        ] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
