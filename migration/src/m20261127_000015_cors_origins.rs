//! The browser origins an integration's wallet or POS web app calls from (CORS). Empty
//! (NULL) for every existing integration: no browser origin is allowed until an operator
//! lists one.
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
            ColumnDef::new(Alias::new("cors_origins"))
                .json_binary()
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        drop_column(m, "integrations", "cors_origins").await
    }
}
