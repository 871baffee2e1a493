//! The ledger learns what finance reports need from it alone (docs/accounting.md):
//!
//! - every entry names the wallet its posting is about (`wallet_id`), so liability, aging
//!   and dormancy group entries by wallet without joining the grants;
//! - a locked grant's credit sits on its own account kind, `promo_grant_locked`, and a
//!   release is a posting that moves it to `promo_grant`;
//! - a settlement top-up requested and not yet settled is posted to `wallet_pending_topup`
//!   (it was only a column, `wallets.pending_topups_minor`, which the entries now keep);
//! - a top-up's posting says how its money came in: `topup_sku` (sold at the till) or
//!   `topup_settlement` (a settled card or bank payment), where both were `topup`;
//! - entries are found by merchant and time, and by wallet and time.
//!
//! Existing rows are backfilled: wallet-side entries name their wallet (a grant's through
//! the grant), counter-entries their posting's wallet; the entries of grants locked now move
//! to `promo_grant_locked` (a grant released before this migration reads as released from
//! its accrual: no release was recorded then); and each wallet's pending top-ups are posted
//! once, at the migration's time. Amounts never change.
use sea_orm::{ConnectionTrait, DbBackend, FromQueryResult, Statement};
use sea_orm_migration::prelude::*;

use crate::{add_column, drop_column, drop_idx, idx, partitions};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(FromQueryResult)]
struct Pending {
    id: uuid::Uuid,
    merchant_id: uuid::Uuid,
    currency: String,
    pending_topups_minor: i64,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        add_column(
            m,
            "ledger_entries",
            ColumnDef::new(Alias::new("wallet_id")).uuid().to_owned(),
        )
        .await?;
        let c = m.get_connection();
        for sql in [
            "UPDATE ledger_entries SET wallet_id = account_id \
             WHERE account_kind IN ('wallet_actual', 'merchant_escrow')",
            "UPDATE ledger_entries SET wallet_id = \
               (SELECT g.wallet_id FROM promo_grants g WHERE g.id = ledger_entries.account_id) \
             WHERE account_kind = 'promo_grant'",
            "UPDATE ledger_entries SET account_kind = 'promo_grant_locked' \
             WHERE account_kind = 'promo_grant' \
               AND account_id IN (SELECT g.id FROM promo_grants g WHERE g.state = 'LOCKED')",
            "UPDATE ledger_postings SET kind = 'topup_settlement' WHERE kind = 'topup' \
               AND id IN (SELECT t.posting_id FROM topups t WHERE t.kind = 'settlement')",
            "UPDATE ledger_postings SET kind = 'topup_sku' WHERE kind = 'topup'",
            "UPDATE ledger_entries SET wallet_id = \
               (SELECT o.wallet_id FROM ledger_entries o \
                WHERE o.posting_id = ledger_entries.posting_id AND o.wallet_id IS NOT NULL \
                LIMIT 1) \
             WHERE wallet_id IS NULL",
        ] {
            c.execute_unprepared(sql).await?;
        }
        post_pending_topups(c).await?;
        m.create_index(idx(
            "ix_ledger_entries_merchant_time",
            "ledger_entries",
            &["merchant_id", "created_at"],
        ))
        .await?;
        m.create_index(idx(
            "ix_ledger_entries_wallet_time",
            "ledger_entries",
            &["wallet_id", "created_at"],
        ))
        .await?;
        m.drop_index(drop_idx("ix_ledger_entries_merchant", "ledger_entries"))
            .await?;
        named(m).await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let c = m.get_connection();
        for sql in [
            "UPDATE ledger_entries SET account_kind = 'promo_grant' \
             WHERE account_kind = 'promo_grant_locked'",
            "UPDATE ledger_postings SET kind = 'topup' \
             WHERE kind IN ('topup_sku', 'topup_settlement')",
            "DELETE FROM ledger_entries WHERE posting_id IN (SELECT id FROM ledger_postings \
               WHERE kind IN ('grant_release', 'topup_requested', 'topup_request_cleared'))",
            "DELETE FROM ledger_postings \
             WHERE kind IN ('grant_release', 'topup_requested', 'topup_request_cleared')",
        ] {
            c.execute_unprepared(sql).await?;
        }
        m.create_index(idx(
            "ix_ledger_entries_merchant",
            "ledger_entries",
            &["merchant_id"],
        ))
        .await?;
        m.drop_index(drop_idx("ix_ledger_entries_wallet_time", "ledger_entries"))
            .await?;
        m.drop_index(drop_idx(
            "ix_ledger_entries_merchant_time",
            "ledger_entries",
        ))
        .await?;
        drop_column(m, "ledger_entries", "wallet_id").await?;
        named(m).await
    }
}

/// One `topup_requested` posting per wallet for what it shows pending now.
async fn post_pending_topups<C: ConnectionTrait>(c: &C) -> Result<(), DbErr> {
    let backend = c.get_database_backend();
    let pending = Pending::find_by_statement(Statement::from_string(
        backend,
        "SELECT id, merchant_id, currency, pending_topups_minor FROM wallets \
         WHERE pending_topups_minor <> 0",
    ))
    .all(c)
    .await?;
    let now = chrono::Utc::now();
    let p = |n: usize| -> String {
        (1..=n)
            .map(|i| {
                if backend == DbBackend::Postgres {
                    format!("${i}")
                } else {
                    "?".to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    for w in pending {
        let posting = uuid::Uuid::now_v7();
        c.execute_raw(Statement::from_sql_and_values(
            backend,
            format!(
                "INSERT INTO ledger_postings (id, merchant_id, kind, reference_type, reference_id, \
                 memo, created_at) VALUES ({})",
                p(7)
            ),
            [
                posting.into(),
                w.merchant_id.into(),
                "topup_requested".into(),
                "wallet".into(),
                w.id.into(),
                "pending top-ups when the ledger began to carry them".into(),
                now.into(),
            ],
        ))
        .await?;
        for (kind, account, amount) in [
            ("wallet_pending_topup", w.id, w.pending_topups_minor),
            (
                "merchant_pending_topup",
                w.merchant_id,
                -w.pending_topups_minor,
            ),
        ] {
            c.execute_raw(Statement::from_sql_and_values(
                backend,
                format!(
                    "INSERT INTO ledger_entries (posting_id, merchant_id, account_kind, account_id, \
                     wallet_id, currency, amount_minor, created_at) VALUES ({})",
                    p(8)
                ),
                [
                    posting.into(),
                    w.merchant_id.into(),
                    kind.into(),
                    account.into(),
                    w.id.into(),
                    w.currency.clone().into(),
                    amount.into(),
                    now.into(),
                ],
            ))
            .await?;
        }
    }
    Ok(())
}

async fn named(m: &SchemaManager<'_>) -> Result<(), DbErr> {
    let c = m.get_connection();
    if c.get_database_backend() == DbBackend::Postgres {
        partitions::name_partition_indexes(c, "ledger_entries").await?;
    }
    Ok(())
}
