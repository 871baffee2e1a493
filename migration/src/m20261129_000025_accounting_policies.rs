//! A merchant's accounting policy for its stored value (docs/accounting.md): after how many
//! days without a customer-initiated movement a wallet is dormant, and the breakage it
//! expects (a rate in basis points, recognised `proportional`ly to redemptions or only once
//! redemption is `remote`). One row per merchant; a merchant without one has the defaults.
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
                .table("accounting_policies")
                .col(pk_uuid("merchant_id"))
                .col(integer("dormancy_days"))
                .col(integer("breakage_rate_bp"))
                // proportional | remote
                .col(string_len("breakage_method", 16))
                .col(timestamp_with_time_zone("updated_at"))
                // Who set it: `key:<id>` (also in the audit log).
                .col(string_len("updated_by", 64))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(
            Table::drop()
                .table(Alias::new("accounting_policies"))
                .to_owned(),
        )
        .await
    }
}
