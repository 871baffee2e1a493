//! The spec's verify body names the enrollment by nothing but the code ("Exactly one of
//! verification_token or code"): a cashier keys the 6 digits at the till that started the
//! enrollment. An enrollment now remembers the terminal that last sent its code
//! (`context.terminal_id`), so a code alone is matched against that terminal's pending
//! enrollment, never across customers at large.
use sea_orm_migration::prelude::*;

use crate::{add_column, drop_column, drop_idx, idx};

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
            "enrollments",
            ColumnDef::new(Alias::new("terminal_id"))
                .string()
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_enrollments_terminal",
            "enrollments",
            &["merchant_id", "terminal_id", "status"],
        ))
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(drop_idx("ix_enrollments_terminal", "enrollments"))
            .await?;
        drop_column(m, "enrollments", "terminal_id").await
    }
}
