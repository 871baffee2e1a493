//! Snapshots are built by the sealed hour, not the sealed day, so the liability now (and at
//! any instant today) reads at most a little over an hour of entries instead of up to a
//! day of them: a merchant's mark becomes the instant up to which its rows are complete
//! (an hour's start, `built_until`). Snapshots are the ledger's alone, so the rows built
//! by days are dropped rather than converted: every builder builds them again, and the
//! figures read from the entries meanwhile are the same.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

const ROWS: [&str; 2] = ["ledger_hour_movements", "ledger_hour_closings"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        marks(m, timestamp_with_time_zone_null("built_until")).await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        marks(m, date_null("built_through")).await
    }
}

/// Empties the snapshots and gives the marks `column` in place of the other one.
async fn marks(m: &SchemaManager<'_>, column: ColumnDef) -> Result<(), DbErr> {
    for t in ROWS {
        m.exec_stmt(Query::delete().from_table(Alias::new(t)).to_owned())
            .await?;
    }
    m.drop_table(Table::drop().table("ledger_snapshot_marks").to_owned())
        .await?;
    m.create_table(
        Table::create()
            .table("ledger_snapshot_marks")
            .col(pk_uuid("merchant_id"))
            // Up to where the rows are complete; none yet while NULL.
            .col(column)
            .col(timestamp_with_time_zone("updated_at"))
            .to_owned(),
    )
    .await
}
