//! A sandbox integration's test clock: how far (in seconds) its time runs ahead of real
//! time after `POST /sandbox/clock/advance`. NULL for every integration that never moved
//! its clock (all live ones): their rules run on real time.
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
            "integrations",
            ColumnDef::new(Alias::new("clock_offset_secs"))
                .big_integer()
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        drop_column(m, "integrations", "clock_offset_secs").await
    }
}
