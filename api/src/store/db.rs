use std::time::Duration;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
};

use sea_orm::{
    ConnAcquireErr, ConnectOptions, ConnectionTrait, Database, DatabaseConnection,
    DatabaseTransaction, DbBackend, DbErr, ExecResult, QueryResult, SqliteTransactionMode,
    Statement, TransactionOptions, TransactionTrait, sqlx::SqlitePool,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// A write transaction. On SQLite it also holds the database file's write gate until it
/// commits, rolls back or is dropped.
pub struct WriteTxn {
    // Declared first so it is dropped first: the gate opens after the transaction ended.
    txn: DatabaseTransaction,
    _turn: Option<WriteTurn>,
}

impl WriteTxn {
    pub async fn commit(self) -> Result<(), DbErr> {
        self.txn.commit().await
    }

    pub async fn rollback(self) -> Result<(), DbErr> {
        self.txn.rollback().await
    }
}

impl std::ops::Deref for WriteTxn {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.txn
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTxn {
    fn get_database_backend(&self) -> DbBackend {
        self.txn.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.txn.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.txn.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.txn.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.txn.query_all_raw(stmt).await
    }

    fn support_returning(&self) -> bool {
        self.txn.support_returning()
    }
}

/// Opens a write transaction. On SQLite it is IMMEDIATE, so concurrent writers queue on the
/// database lock at BEGIN instead of failing at COMMIT; PostgreSQL serialises on row locks.
pub async fn begin(db: &DatabaseConnection) -> Result<WriteTxn, DbErr> {
    match db.get_database_backend() {
        DbBackend::Sqlite => {
            let turn = write_turn(db.get_sqlite_connection_pool()).await?;
            let txn = db
                .begin_with_options(TransactionOptions {
                    sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                    ..Default::default()
                })
                .await?;
            Ok(WriteTxn {
                txn,
                _turn: Some(turn),
            })
        }
        _ => Ok(WriteTxn {
            txn: db.begin().await?,
            _turn: None,
        }),
    }
}

/// How long a writer waits for its turn: as long as SQLite's own busy timeout, past which
/// the caller gets the same retryable error.
const WRITE_TURN_WAIT: Duration = Duration::from_secs(10);

/// The right to write to one SQLite file, held for a write transaction's life.
pub struct WriteTurn {
    _permit: OwnedSemaphorePermit,
}

/// Waits for this SQLite file's write turn, in arrival order.
///
/// SQLite admits one writer at a time. Without the gate the others wait in its busy
/// handler, which sleeps in growing steps (1, 2, 5, 10 … 100 ms) and retries: a writer
/// that arrives just as the lock is freed goes first, and the ones asleep wake late, so
/// under load the database sat idle between transactions and a few callers waited close
/// to a second. Here they queue in memory and the next one starts the moment the previous
/// one ends. The gate is per file, not per pool: the relay's and the queue's own pools,
/// and every app a test process opens on one file, write to the same database.
pub async fn write_turn(pool: &SqlitePool) -> Result<WriteTurn, DbErr> {
    static GATES: OnceLock<Mutex<HashMap<PathBuf, Arc<Semaphore>>>> = OnceLock::new();
    let file = pool.connect_options().get_filename().to_path_buf();
    let gate = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(file)
        .or_insert_with(|| Arc::new(Semaphore::new(1)))
        .clone();
    match tokio::time::timeout(WRITE_TURN_WAIT, gate.acquire_owned()).await {
        Ok(Ok(permit)) => Ok(WriteTurn { _permit: permit }),
        // The semaphore is never closed; a timeout is the database being too busy.
        _ => Err(DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)),
    }
}

/// Ends the database sessions cleanly: a process that just exits leaves PostgreSQL to find
/// its sockets reset, one "could not receive data from client" log line per pooled
/// connection on every deploy. Waits a while for connections still checked out. A failure
/// here changes nothing the process did, so it is not reported.
pub async fn close(db: &DatabaseConnection) {
    let _ = tokio::time::timeout(Duration::from_secs(5), db.clone().close()).await;
}

pub async fn ping(db: &DatabaseConnection, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, db.execute_unprepared("SELECT 1")).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::{path::Path, pin::pin, task::Poll};

    use futures::poll;
    use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    use uuid::Uuid;

    use super::*;

    fn temp_file() -> PathBuf {
        std::env::temp_dir().join(format!("wallet-write-turn-{}.db", Uuid::now_v7()))
    }

    async fn pool(file: &Path) -> SqlitePool {
        SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(file)
                    .create_if_missing(true),
            )
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn two_pools_on_one_file_write_one_at_a_time() {
        let file = temp_file();
        let (a, b) = (pool(&file).await, pool(&file).await);
        let first = write_turn(&a).await.unwrap();
        let mut second = pin!(write_turn(&b));
        assert!(poll!(&mut second).is_pending());
        drop(first);
        assert!(matches!(poll!(&mut second), Poll::Ready(Ok(_))));
    }

    #[tokio::test]
    async fn another_file_has_a_turn_of_its_own() {
        let (a, b) = (pool(&temp_file()).await, pool(&temp_file()).await);
        let _first = write_turn(&a).await.unwrap();
        assert!(matches!(poll!(pin!(write_turn(&b))), Poll::Ready(Ok(_))));
    }

    #[tokio::test]
    async fn writers_get_their_turn_in_arrival_order() {
        let p = pool(&temp_file()).await;
        let held = write_turn(&p).await.unwrap();
        let mut waiting: Vec<_> = (0..5).map(|_| Box::pin(write_turn(&p))).collect();
        for w in waiting.iter_mut() {
            assert!(poll!(w.as_mut()).is_pending());
        }
        let mut turn = held;
        for next in 0..waiting.len() {
            drop(turn);
            // Only the longest-waiting writer is let in; the ones behind it still wait.
            let mut got = None;
            for (i, w) in waiting.iter_mut().enumerate().skip(next) {
                match poll!(w.as_mut()) {
                    Poll::Ready(t) => {
                        assert_eq!(i, next, "writer {i} went before writer {next}");
                        got = Some(t.unwrap());
                    }
                    Poll::Pending => assert_ne!(i, next, "writer {next} was not let in"),
                }
            }
            turn = got.unwrap();
        }
    }

    #[tokio::test]
    async fn a_write_transaction_holds_the_turn_until_it_ends() {
        let url = format!("sqlite://{}?mode=rwc", temp_file().display());
        let db = Database::connect(&url).await.unwrap();
        let txn = begin(&db).await.unwrap();
        txn.execute_unprepared("CREATE TABLE t (x INTEGER)")
            .await
            .unwrap();
        let mut other = pin!(write_turn(db.get_sqlite_connection_pool()));
        assert!(poll!(&mut other).is_pending());
        txn.commit().await.unwrap();
        let other = other.await.unwrap();
        drop(other);

        let txn = begin(&db).await.unwrap();
        let mut other = pin!(write_turn(db.get_sqlite_connection_pool()));
        assert!(poll!(&mut other).is_pending());
        drop(txn);
        assert!(matches!(poll!(&mut other), Poll::Ready(Ok(_))));
    }
}
