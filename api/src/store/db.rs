use std::time::Duration;

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

use crate::config::Config;

pub async fn connect(cfg: &Config) -> anyhow::Result<DatabaseConnection> {
    let url = cfg.effective_database_url();
    if url.starts_with("sqlite:") && cfg.database_url.is_none() {
        std::fs::create_dir_all(&cfg.data_dir)?;
    }
    let mut opts = ConnectOptions::new(url.clone());
    opts.max_connections(cfg.db_max_connections)
        .min_connections(1)
        .connect_timeout(Duration::from_millis(cfg.db_acquire_timeout_ms))
        .acquire_timeout(Duration::from_millis(cfg.db_acquire_timeout_ms))
        .sqlx_logging(false)
        // sqlx pings every connection it hands out by default: a round trip on every
        // checkout, two per mutation. Only a connection idle long enough to have been
        // dropped by the server or the network is checked; one that breaks mid-request
        // fails that request with a retryable error, which a retry with the same
        // Idempotency-Key settles.
        .test_before_acquire_if_idle_for(Duration::from_secs(10));
    if url.starts_with("sqlite:") {
        // WAL lets readers run beside the single writer; busy_timeout makes a second writer
        // wait for the first instead of failing; foreign keys are off by default in SQLite.
        opts.map_sqlx_sqlite_opts(|o| {
            o.journal_mode(sqlx_sqlite_journal_wal())
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true)
                .create_if_missing(true)
        });
    }
    if url.starts_with("postgres") {
        // A request never waits on a row lock longer than this (one hot wallet's queue, a
        // payment behind a refund): past it the statement fails with 55P03, which is
        // answered as a retryable 503, instead of the caller waiting without bound.
        let lock_timeout = format!("{}ms", cfg.db_lock_timeout_ms);
        opts.map_sqlx_postgres_opts(move |o| o.options([("lock_timeout", lock_timeout.as_str())]));
    }
    let db = Database::connect(opts).await?;
    Ok(db)
}

fn sqlx_sqlite_journal_wal() -> sea_orm::sqlx::sqlite::SqliteJournalMode {
    sea_orm::sqlx::sqlite::SqliteJournalMode::Wal
}

/// Opens a write transaction. On SQLite it is IMMEDIATE, so concurrent writers queue on the
/// database lock at BEGIN instead of failing at COMMIT; PostgreSQL serialises on row locks.
pub async fn begin(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    match db.get_database_backend() {
        DbBackend::Sqlite => {
            db.begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await
        }
        _ => db.begin().await,
    }
}

pub async fn ping(db: &DatabaseConnection, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, db.execute_unprepared("SELECT 1")).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}
