//! Keys get permissions (what they may do, beside where) and remember which key minted
//! them, so a key's tree can be listed and revoked.
//!
//! Every existing key keeps what it effectively had: before permissions existed, any key
//! could do everything within its scope, so each is given every permission of this
//! version. The names are written out here, not read from the service, because a landed
//! migration never changes.
//!
//! Both columns stay nullable in the schema (SQLite cannot add a NOT NULL column without a
//! default); the backfill fills `permissions` on every row and every insert sets it.
use sea_orm_migration::prelude::*;

use crate::{add_column, drop_column, drop_idx, idx};

#[derive(DeriveMigrationName)]
pub struct Migration;

const EVERY_PERMISSION: &str = "integrations:create integrations:read integrations:update \
     integrations:delete terminal reporting settlements catalog incentives webhooks";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ColumnDef::new(Alias::new("permissions")).text().to_owned(),
            ColumnDef::new(Alias::new("created_by_key_id"))
                .uuid()
                .to_owned(),
        ] {
            add_column(m, "api_keys", column).await?;
        }
        m.get_connection()
            .execute_unprepared(&format!(
                "UPDATE api_keys SET permissions = '{EVERY_PERMISSION}'"
            ))
            .await?;
        m.create_index(idx(
            "ix_api_keys_created_by",
            "api_keys",
            &["created_by_key_id"],
        ))
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(drop_idx("ix_api_keys_created_by", "api_keys"))
            .await?;
        for column in ["created_by_key_id", "permissions"] {
            drop_column(m, "api_keys", column).await?;
        }
        Ok(())
    }
}
