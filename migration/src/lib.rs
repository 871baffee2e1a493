//! Schema migrations. One file per migration; a migration is never edited after it lands.
//! The same migrations run unchanged on SQLite (embedded mode) and PostgreSQL (production):
//! only portable column types, no SQL defaults (timestamps are set in code), and a partial
//! index only where its statement is the same on both (000008, 000009). Partitioning
//! (000020, `partitions`) is PostgreSQL's alone.
pub use sea_orm_migration::prelude::*;

mod m20261121_000001_foundation;
mod m20261121_000002_operators;
mod m20261121_000003_wallets;
mod m20261121_000004_customers;
mod m20261121_000005_topups;
mod m20261121_000006_incentives;
mod m20261121_000007_webhooks;
mod m20261122_000008_history_indexes;
mod m20261122_000009_feed_indexes;
mod m20261126_000010_feed_movements;
mod m20261126_000011_key_permissions;
mod m20261126_000012_pending_topups;
mod m20261126_000013_enrollment_terminal;
mod m20261126_000014_disputes;
mod m20261127_000015_cors_origins;
mod m20261127_000016_event_feed;
mod m20261127_000017_test_clock;
mod m20261127_000018_ops_console;
mod m20261128_000019_trace_origin;
mod m20261128_000020_partitioned_history;
mod m20261128_000021_wallet_payments_by_id;
mod m20261128_000022_operator_sessions;
mod m20261129_000023_value_classes;
mod m20261129_000024_report_runs;
mod m20261129_000025_accounting_policies;
mod m20261129_000026_ledger_snapshots;
mod m20261129_000027_wallet_value_index;
mod m20261129_000028_snapshot_marks_by_hour;
mod m20261130_000029_wallets_by_merchant_id;
mod m20261130_000030_risk_controls;
pub mod partitions;

/// An index named `name` on `table(cols)`. Migrations from 000006 on share this one; the
/// earlier files keep their own copy, as landed migrations are never edited.
pub(crate) fn idx(name: &str, table: &str, cols: &[&str]) -> IndexCreateStatement {
    let mut i = Index::create();
    i.name(name).table(Alias::new(table));
    for c in cols {
        i.col(Alias::new(*c));
    }
    i.to_owned()
}

/// Drops the index `name` of `table` (the table is named for backends that need it).
pub(crate) fn drop_idx(name: &str, table: &str) -> IndexDropStatement {
    Index::drop().name(name).table(Alias::new(table)).to_owned()
}

/// Adds a nullable column (SQLite cannot add a NOT NULL one without a default: a migration
/// that needs every row filled backfills it).
pub(crate) async fn add_column(
    m: &SchemaManager<'_>,
    table: &str,
    mut column: ColumnDef,
) -> Result<(), DbErr> {
    m.alter_table(
        Table::alter()
            .table(Alias::new(table))
            .add_column(column.null())
            .to_owned(),
    )
    .await
}

pub(crate) async fn drop_column(
    m: &SchemaManager<'_>,
    table: &str,
    name: &str,
) -> Result<(), DbErr> {
    m.alter_table(
        Table::alter()
            .table(Alias::new(table))
            .drop_column(Alias::new(name))
            .to_owned(),
    )
    .await
}

pub struct Migrator;

impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261121_000001_foundation::Migration),
            Box::new(m20261121_000002_operators::Migration),
            Box::new(m20261121_000003_wallets::Migration),
            Box::new(m20261121_000004_customers::Migration),
            Box::new(m20261121_000005_topups::Migration),
            Box::new(m20261121_000006_incentives::Migration),
            Box::new(m20261121_000007_webhooks::Migration),
            Box::new(m20261122_000008_history_indexes::Migration),
            Box::new(m20261122_000009_feed_indexes::Migration),
            Box::new(m20261126_000010_feed_movements::Migration),
            Box::new(m20261126_000011_key_permissions::Migration),
            Box::new(m20261126_000012_pending_topups::Migration),
            Box::new(m20261126_000013_enrollment_terminal::Migration),
            Box::new(m20261126_000014_disputes::Migration),
            Box::new(m20261127_000015_cors_origins::Migration),
            Box::new(m20261127_000016_event_feed::Migration),
            Box::new(m20261127_000017_test_clock::Migration),
            Box::new(m20261127_000018_ops_console::Migration),
            Box::new(m20261128_000019_trace_origin::Migration),
            Box::new(m20261128_000020_partitioned_history::Migration),
            Box::new(m20261128_000021_wallet_payments_by_id::Migration),
            Box::new(m20261128_000022_operator_sessions::Migration),
            Box::new(m20261129_000023_value_classes::Migration),
            Box::new(m20261129_000024_report_runs::Migration),
            Box::new(m20261129_000025_accounting_policies::Migration),
            Box::new(m20261129_000026_ledger_snapshots::Migration),
            Box::new(m20261129_000027_wallet_value_index::Migration),
            Box::new(m20261129_000028_snapshot_marks_by_hour::Migration),
            Box::new(m20261130_000029_wallets_by_merchant_id::Migration),
            Box::new(m20261130_000030_risk_controls::Migration),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deploy rolled back must be able to take its migrations back: the newest ones go
    /// down and apply again on a database that has them all.
    #[tokio::test]
    async fn the_newest_migrations_go_down_and_apply_again() {
        let db = sea_orm::Database::connect("sqlite::memory:").await.unwrap();
        Migrator::up(&db, None).await.unwrap();
        Migrator::down(&db, Some(2)).await.unwrap();
        assert_eq!(
            Migrator::get_pending_migrations(&db).await.unwrap().len(),
            2
        );
        Migrator::up(&db, None).await.unwrap();
        assert!(
            Migrator::get_pending_migrations(&db)
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// Existing keys keep what they effectively had (000014, 000030): a key that could
    /// reconcile (it holds `settlements`) may now correct and set risk limits too; a till's
    /// default set gains nothing.
    #[tokio::test]
    async fn keys_that_hold_settlements_are_given_corrections_and_risk() {
        use sea_orm::{ConnectionTrait, Statement};
        let db = sea_orm::Database::connect("sqlite::memory:").await.unwrap();
        Migrator::up(&db, Some(13)).await.unwrap();
        db.execute_unprepared("PRAGMA foreign_keys = OFF")
            .await
            .unwrap();
        for (id, permissions) in [
            ("k-back-office", "reporting settlements"),
            ("k-till", "terminal reporting"),
        ] {
            db.execute_unprepared(&format!(
                "INSERT INTO api_keys (id, integration_id, scope, key_prefix, key_hash, \
                 key_last_four, label, is_sandbox, status, permissions, created_at) VALUES \
                 ('{id}', 'i', 'enterprise', 'p', 'h', '0000', 'l', 0, 'active', \
                 '{permissions}', '2026-11-26T00:00:00Z')"
            ))
            .await
            .unwrap();
        }
        Migrator::up(&db, None).await.unwrap();
        let rows = db
            .query_all_raw(Statement::from_string(
                db.get_database_backend(),
                "SELECT id, permissions FROM api_keys ORDER BY id",
            ))
            .await
            .unwrap();
        let got: Vec<(String, String)> = rows
            .iter()
            .map(|r| {
                (
                    r.try_get::<String>("", "id").unwrap(),
                    r.try_get::<String>("", "permissions").unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "k-back-office".to_string(),
                    // 000014, then 000030.
                    "reporting settlements corrections risk".to_string()
                ),
                ("k-till".to_string(), "terminal reporting".to_string()),
            ]
        );
    }

    /// 000023: the ledger learns which grants are locked, what top-ups are pending and
    /// which wallet each entry is about, from the rows already there; no amount changes.
    #[tokio::test]
    async fn existing_entries_learn_their_wallet_locked_grants_and_pending_topups() {
        use sea_orm::{ConnectionTrait, Statement, Value};
        let db = sea_orm::Database::connect("sqlite::memory:").await.unwrap();
        Migrator::up(&db, Some(22)).await.unwrap();
        db.execute_unprepared("PRAGMA foreign_keys = OFF")
            .await
            .unwrap();
        let backend = db.get_database_backend();
        let (m, w, locked, released) = (
            uuid::Uuid::now_v7(),
            uuid::Uuid::now_v7(),
            uuid::Uuid::now_v7(),
            uuid::Uuid::now_v7(),
        );
        let now = chrono::Utc::now();
        let run = |sql: &str, values: Vec<Value>| {
            db.execute_raw(Statement::from_sql_and_values(backend, sql, values))
        };
        run(
            "INSERT INTO wallets (id, wallet_user_id, merchant_id, wallet_program_id, currency, \
             actual_minor, pending_topups_minor, created_at, updated_at) \
             VALUES (?, ?, ?, ?, 'EUR', 1000, 700, ?, ?)",
            vec![
                w.into(),
                m.into(),
                m.into(),
                m.into(),
                now.into(),
                now.into(),
            ],
        )
        .await
        .unwrap();
        for (g, state, amount) in [(locked, "LOCKED", 300i64), (released, "RELEASED", 100)] {
            run(
                "INSERT INTO promo_grants (id, wallet_id, merchant_id, source, state, currency, \
                 original_minor, remaining_minor, expires_at, created_at, updated_at) \
                 VALUES (?, ?, ?, 'CASHBACK', ?, 'EUR', ?, ?, ?, ?, ?)",
                vec![
                    g.into(),
                    w.into(),
                    m.into(),
                    state.into(),
                    amount.into(),
                    amount.into(),
                    now.into(),
                    now.into(),
                    now.into(),
                ],
            )
            .await
            .unwrap();
        }
        let postings = [
            (
                "grant_accrual",
                vec![
                    ("promo_grant", locked, 300i64),
                    ("merchant_promo_funding", m, -300),
                ],
            ),
            (
                "grant_accrual",
                vec![
                    ("promo_grant", released, 100),
                    ("merchant_promo_funding", m, -100),
                ],
            ),
            (
                "adjustment",
                vec![
                    ("wallet_actual", w, 1000),
                    ("merchant_adjustment", m, -1000),
                ],
            ),
        ];
        for (kind, entries) in postings {
            let p = uuid::Uuid::now_v7();
            run(
                "INSERT INTO ledger_postings (id, merchant_id, kind, reference_type, reference_id, \
                 memo, created_at) VALUES (?, ?, ?, 'test', ?, NULL, ?)",
                vec![p.into(), m.into(), kind.into(), p.into(), now.into()],
            )
            .await
            .unwrap();
            for (account_kind, account, amount) in entries {
                run(
                    "INSERT INTO ledger_entries (posting_id, merchant_id, account_kind, account_id, \
                     currency, amount_minor, created_at) VALUES (?, ?, ?, ?, 'EUR', ?, ?)",
                    vec![p.into(), m.into(), account_kind.into(), account.into(), amount.into(), now.into()],
                )
                .await
                .unwrap();
            }
        }
        Migrator::up(&db, None).await.unwrap();

        let rows = db
            .query_all_raw(Statement::from_string(
                backend,
                "SELECT account_kind, account_id, wallet_id, amount_minor FROM ledger_entries ORDER BY id",
            ))
            .await
            .unwrap();
        let got: Vec<(String, uuid::Uuid, Option<uuid::Uuid>, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r.try_get("", "account_kind").unwrap(),
                    r.try_get("", "account_id").unwrap(),
                    r.try_get("", "wallet_id").unwrap(),
                    r.try_get("", "amount_minor").unwrap(),
                )
            })
            .collect();
        let expected = vec![
            ("promo_grant_locked".to_string(), locked, Some(w), 300),
            ("merchant_promo_funding".to_string(), m, Some(w), -300),
            ("promo_grant".to_string(), released, Some(w), 100),
            ("merchant_promo_funding".to_string(), m, Some(w), -100),
            ("wallet_actual".to_string(), w, Some(w), 1000),
            ("merchant_adjustment".to_string(), m, Some(w), -1000),
            ("wallet_pending_topup".to_string(), w, Some(w), 700),
            ("merchant_pending_topup".to_string(), m, Some(w), -700),
        ];
        assert_eq!(got, expected);
        Migrator::down(&db, Some(1)).await.unwrap();
        Migrator::up(&db, None).await.unwrap();
    }
}
