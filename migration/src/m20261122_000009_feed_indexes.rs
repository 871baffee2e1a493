//! Indexes for the lists and look-ups that read a growing history on every call (found by
//! reading every query against the indexes after 000008):
//!
//! - **The transactions feed** (`GET /v1/{integration_id}/transactions`, every page) filters
//!   payments and top-ups by integration and pages them newest first by id. No index
//!   started with the integration: a key of the whole integration scanned both tables.
//! - **A wallet's latest payments** (identify, checkout identify, customer look-up) sorted
//!   the wallet's whole payment history to return one row or a few.
//! - **A subscription's deliveries** and **a merchant's offers** were read in full and
//!   sorted before their page limit applied.
//! - **The relay** finds the integrations linked to a merchant (every batch with events);
//!   the table's key starts with the integration.
//! - **The credential sweep** (every 30 s on every worker) deletes expired OTP sessions and
//!   QR nonces that never paid; a paid one stays as its payment's record, so both tables
//!   grow with payments and the sweep scanned them whole. Partial indexes hold only the
//!   unpaid rows; their statement is the same on SQLite and PostgreSQL.
use sea_orm_migration::prelude::*;

use crate::{drop_idx, idx};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// (name, table, columns) of the plain indexes.
const PLAIN: &[(&str, &str, &[&str])] = &[
    (
        "ix_payments_integration",
        "payments",
        &["integration_id", "id"],
    ),
    ("ix_topups_integration", "topups", &["integration_id", "id"]),
    (
        "ix_payments_wallet_created",
        "payments",
        &["wallet_id", "created_at"],
    ),
    (
        "ix_webhook_deliveries_subscription",
        "webhook_deliveries",
        &["subscription_id", "id"],
    ),
    ("ix_offers_merchant", "offers", &["merchant_id", "id"]),
    (
        "ix_integration_enterprises_enterprise",
        "integration_enterprises",
        &["enterprise_id"],
    ),
];

/// (name, table) of the partial indexes of unpaid credentials by expiry.
const UNPAID: &[(&str, &str)] = &[
    ("ix_otp_sessions_unpaid_expiry", "otp_sessions"),
    ("ix_qr_nonces_unpaid_expiry", "qr_nonces"),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, cols) in PLAIN {
            m.create_index(idx(name, table, cols)).await?;
        }
        for (name, table) in UNPAID {
            m.get_connection()
                .execute_unprepared(&format!(
                    "CREATE INDEX {name} ON {table} (expires_at) WHERE payment_id IS NULL"
                ))
                .await?;
        }
        // (wallet_id, created_at) serves every look-up by wallet the old index did.
        m.drop_index(drop_idx("ix_payments_wallet", "payments"))
            .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(idx("ix_payments_wallet", "payments", &["wallet_id"]))
            .await?;
        for (name, table) in UNPAID {
            m.drop_index(drop_idx(name, table)).await?;
        }
        for (name, table, _) in PLAIN {
            m.drop_index(drop_idx(name, table)).await?;
        }
        Ok(())
    }
}
