//! A wallet's latest payments by id (UUIDv7, the payments' partition key on PostgreSQL)
//! instead of by `created_at`: newest first, the partitions are read newest first and the
//! read stops at the page's end, where an index without the key read every partition. Both
//! orders are the order payments were taken in.
use sea_orm::{ConnectionTrait, DbBackend};
use sea_orm_migration::prelude::*;

use crate::{drop_idx, idx, partitions};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx(
            "ix_payments_wallet_id",
            "payments",
            &["wallet_id", "id"],
        ))
        .await?;
        m.drop_index(drop_idx("ix_payments_wallet_created", "payments"))
            .await?;
        named(m).await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx(
            "ix_payments_wallet_created",
            "payments",
            &["wallet_id", "created_at"],
        ))
        .await?;
        m.drop_index(drop_idx("ix_payments_wallet_id", "payments"))
            .await?;
        named(m).await
    }
}

async fn named(m: &SchemaManager<'_>) -> Result<(), DbErr> {
    let c = m.get_connection();
    if c.get_database_backend() == DbBackend::Postgres {
        partitions::name_partition_indexes(c, "payments").await?;
    }
    Ok(())
}
