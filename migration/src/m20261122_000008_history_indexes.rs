//! Indexes for look-ups on tables that only grow. Each of these was a walk of the table's
//! whole history, made on every call.
//!
//! The outbox is also the event history, so relayed rows stay.
//!
//! **The relay's poll**, through an index of the pending rows alone. The index on
//! `(relayed_at, id)` held every row, and PostgreSQL could plan the relay's poll
//! (`relayed_at IS NULL ORDER BY id LIMIT n`, every 100 ms) as a walk of the primary key
//! that filters out every relayed row: on a table of 70,000 relayed rows and 20 pending ones
//! that took 38 ms a poll, and it grows with the history. A partial index holds only the
//! rows still to relay, in id order, so the poll reads those and stops at its limit
//! (0.04 ms on the same table). Its statement is the same on SQLite and PostgreSQL, so it
//! is written out once.
//!
//! **A resource's events** (`events_of`, read by every transaction detail) were found by
//! scanning the whole table: an index on the resource and its sequence finds them directly.
//!
//! **A wallet's recent OTP sends** (the per-wallet send limit, counted on every OTP send)
//! were found by scanning every session ever made: a paid session is kept as the record
//! of its payment. An index on the wallet and the time finds them directly.

use sea_orm_migration::prelude::*;

use crate::{drop_idx, idx};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection()
            .execute_unprepared(
                "CREATE INDEX ix_outbox_unrelayed ON outbox (id) WHERE relayed_at IS NULL",
            )
            .await?;
        m.create_index(idx(
            "ix_outbox_resource",
            "outbox",
            &["resource_type", "resource_id", "sequence_number"],
        ))
        .await?;
        m.create_index(idx(
            "ix_otp_sessions_wallet",
            "otp_sessions",
            &["wallet_id", "created_at"],
        ))
        .await?;
        m.drop_index(drop_idx("ix_outbox_pending", "outbox")).await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx("ix_outbox_pending", "outbox", &["relayed_at", "id"]))
            .await?;
        for (name, table) in [
            ("ix_otp_sessions_wallet", "otp_sessions"),
            ("ix_outbox_resource", "outbox"),
            ("ix_outbox_unrelayed", "outbox"),
        ] {
            m.drop_index(drop_idx(name, table)).await?;
        }
        Ok(())
    }
}
