//! Operator credentials: the service's own staff, never a partner key.
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
                .table("operators")
                .col(pk_uuid("id"))
                .col(string_len("name", 200))
                .col(string_len("key_prefix", 64))
                .col(string_len("key_hash", 128))
                .col(string_len("key_last_four", 4))
                // active | inactive
                .col(string_len("status", 16))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ix_operators_prefix")
                .table(Alias::new("operators"))
                .col(Alias::new("key_prefix"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ix_operator_audit_created")
                .table(Alias::new("operator_audit_log"))
                .col(Alias::new("created_at"))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name("ix_operator_audit_created")
                .table(Alias::new("operator_audit_log"))
                .to_owned(),
        )
        .await?;
        m.drop_table(Table::drop().table(Alias::new("operators")).to_owned())
            .await
    }
}
