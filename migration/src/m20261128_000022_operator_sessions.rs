//! Console sessions kept on the server: signing out ends one, and disabling or enabling an
//! operator ends every session they had. The cookie names a row here (and is MAC-signed),
//! so a copied cookie stops working the moment its row is revoked. Also an operator's
//! sessions by operator, for ending them all at once.
use sea_orm_migration::{prelude::*, schema::*};

use crate::{drop_idx, idx};

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
                .table("operator_sessions")
                .col(pk_uuid("id"))
                .col(uuid("operator_id"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("expires_at"))
                .col(timestamp_with_time_zone_null("revoked_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_operator_sessions_operator",
            "operator_sessions",
            &["operator_id", "revoked_at"],
        ))
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(drop_idx(
            "ix_operator_sessions_operator",
            "operator_sessions",
        ))
        .await?;
        m.drop_table(
            Table::drop()
                .table(Alias::new("operator_sessions"))
                .to_owned(),
        )
        .await
    }
}
