//! A merchant's wallets in id order, so aging and dormancy walk every wallet a page at a
//! time from the index (`merchant_id, id`) and read each one's entries through the wallet
//! index: the old `merchant_id` index gave a merchant's wallets in no useful order, so a
//! page either sorted all of them or scanned every merchant's. The old index is the new
//! one's prefix, so it goes.
use sea_orm_migration::prelude::*;

use crate::{drop_idx, idx};

#[derive(DeriveMigrationName)]
pub struct Migration;

const NEW: &str = "ix_wallets_merchant_id";
const OLD: &str = "ix_wallets_merchant";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx(NEW, "wallets", &["merchant_id", "id"]))
            .await?;
        m.drop_index(drop_idx(OLD, "wallets")).await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx(OLD, "wallets", &["merchant_id"]))
            .await?;
        m.drop_index(drop_idx(NEW, "wallets")).await
    }
}
