//! The transactions feed lists each movement of money when it happened: a refund or void is
//! its own line, dated by when the money went back. Its page is read like the payments' and
//! top-ups' (an integration's rows newest first by id), so a refund carries its payment's
//! integration and an index serves that order; a join to the payments would walk every
//! tenant's refunds.
//!
//! The column stays nullable in the schema because SQLite cannot add a NOT NULL column
//! without a default; the backfill below fills every existing row and every insert sets it.
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
            "payment_refunds",
            ColumnDef::new(Alias::new("integration_id"))
                .uuid()
                .to_owned(),
        )
        .await?;
        m.get_connection()
            .execute_unprepared(
                "UPDATE payment_refunds SET integration_id = \
                 (SELECT p.integration_id FROM payments p WHERE p.id = payment_refunds.payment_id)",
            )
            .await?;
        m.create_index(idx(
            "ix_payment_refunds_integration",
            "payment_refunds",
            &["integration_id", "id"],
        ))
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(drop_idx(
            "ix_payment_refunds_integration",
            "payment_refunds",
        ))
        .await?;
        drop_column(m, "payment_refunds", "integration_id").await
    }
}
