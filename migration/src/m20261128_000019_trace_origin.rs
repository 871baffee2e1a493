//! Where each outbox row and webhook delivery came from: the id of the request that caused
//! it and its W3C trace context, so the job or delivery that follows logs the originating
//! request id and continues its trace. NULL for rows written before, and for rows no
//! request caused (sweeps, retention).
use sea_orm_migration::prelude::*;

use crate::{add_column, drop_column};

#[derive(DeriveMigrationName)]
pub struct Migration;

const TABLES: [&str; 2] = ["outbox", "webhook_deliveries"];
const COLUMNS: [&str; 2] = ["request_id", "traceparent"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in TABLES {
            for column in COLUMNS {
                add_column(
                    m,
                    table,
                    ColumnDef::new(Alias::new(column)).string().to_owned(),
                )
                .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in TABLES {
            for column in COLUMNS {
                drop_column(m, table, column).await?;
            }
        }
        Ok(())
    }
}
