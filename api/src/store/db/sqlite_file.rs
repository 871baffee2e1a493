//! One SQLite file's writes: the write turn every writer takes in arrival order, the one
//! connection `store::begin` writes through, and the WAL checkpoint kept off the turn.
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use sea_orm::{
    ConnAcquireErr, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, SqlxSqliteConnector,
    sqlx::{SqlitePool, sqlite::SqlitePoolOptions},
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::store::db::pooler::Db;

/// How long a writer waits for its turn: as long as SQLite's own busy timeout, past which
/// the caller gets the same retryable error.
const WRITE_TURN_WAIT: Duration = Duration::from_secs(10);

/// The writer connection's page cache (KiB, as SQLite's negative `cache_size`): enough for
/// the pages a payment touches in every table and index it writes, which the default
/// (2 MiB) evicts between payments once the indexes on random keys (idempotency keys,
/// credential hashes, wallets) outgrow it. Only the one writer has it.
const WRITER_CACHE: &str = "-32768";
const WRITER_STATEMENTS: usize = 400;

/// A connection checkpoints the WAL on its own, inside its commit, once the WAL holds this
/// many pages. SQLite's default (1,000) did that every fifty or so payments, holding the
/// write turn while it copied pages to the database file; `checkpoint` does it off the
/// turn, so this is only the bound for a process that does not run it (a CLI command).
pub(in crate::store) const WAL_BACKSTOP_PAGES: u32 = 20_000;

/// How often `checkpoint` should run: the WAL then holds a fraction of a second of writes.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Copies the WAL's pages into the SQLite database file (nothing on PostgreSQL or an
/// in-memory database).
///
/// The bulk runs beside the writers, without the write turn. A WAL is only rewritten from
/// its start by a writer that finds it wholly copied, which under steady writes it never
/// is once the copy ran beside them; so the few pages committed meanwhile are then copied
/// under the turn, and the next writer starts the WAL over instead of growing it.
pub async fn checkpoint(db: &Db) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    let db = db.connection();
    let pool = db.get_sqlite_connection_pool();
    let file = FileWriter::of(pool);
    let Some(writer) = file.writer(pool).await? else {
        return Ok(());
    };
    db.execute_unprepared("PRAGMA wal_checkpoint(PASSIVE)")
        .await?;
    let _turn = file.turn().await?;
    // The writer connection: free while the turn is held, where a pool connection could
    // keep the writers waiting for one.
    writer
        .execute_unprepared("PRAGMA wal_checkpoint(PASSIVE)")
        .await?;
    Ok(())
}

/// The right to write to one SQLite file, held for a write transaction's life.
pub struct WriteTurn {
    _permit: OwnedSemaphorePermit,
}

/// What every pool on one SQLite file shares: the write turn, and the connection that
/// `begin` writes through.
///
/// The writes of `begin` go through one connection of their own rather than any of the
/// pool's. In WAL mode a connection throws its whole page cache away when it starts a
/// transaction after another connection changed the file, so with writes spread over the
/// pool nearly every write transaction started cold and read the tables' and indexes'
/// pages again, all of it while holding the turn. One writer keeps its cache (and its
/// prepared statements) warm; only the few writes the outbox relay and queue pushes send
/// through the pool (under the same turn) cool it.
pub(in crate::store) struct FileWriter {
    gate: Arc<Semaphore>,
    writer: tokio::sync::OnceCell<Option<DatabaseConnection>>,
}

impl FileWriter {
    pub(in crate::store) fn of(pool: &SqlitePool) -> Arc<FileWriter> {
        static FILES: OnceLock<Mutex<HashMap<PathBuf, Arc<FileWriter>>>> = OnceLock::new();
        let file = pool.connect_options().get_filename().to_path_buf();
        FILES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(file)
            .or_insert_with(|| {
                Arc::new(FileWriter {
                    gate: Arc::new(Semaphore::new(1)),
                    writer: tokio::sync::OnceCell::new(),
                })
            })
            .clone()
    }

    /// Waits for the write turn, in arrival order.
    pub(in crate::store) async fn turn(&self) -> Result<WriteTurn, DbErr> {
        match tokio::time::timeout(WRITE_TURN_WAIT, self.gate.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(WriteTurn { _permit: permit }),
            // The semaphore is never closed; a timeout is the database being too busy.
            _ => Err(DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)),
        }
    }

    /// The file's writer connection, opened with `pool`'s options on first use. `None` for
    /// an in-memory database, which only the pool's own connections share.
    pub(in crate::store) async fn writer(
        &self,
        pool: &SqlitePool,
    ) -> Result<Option<&DatabaseConnection>, DbErr> {
        let writer = self
            .writer
            .get_or_try_init(|| async {
                let options = pool.connect_options();
                let file = options.get_filename().to_string_lossy();
                if file.contains(":memory:") || file.starts_with("file:sqlx-in-memory") {
                    return Ok(None);
                }
                let writer = SqlitePoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .acquire_timeout(WRITE_TURN_WAIT)
                    // No ping per transaction: it is a call to the connection's thread and
                    // back while the turn is held, and a file does not drop a connection.
                    .test_before_acquire(false)
                    // Kept for the process' life: a fresh connection starts cold.
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connect_with(
                        (*options)
                            .clone()
                            .pragma("cache_size", WRITER_CACHE)
                            // Every write statement of the service is prepared on this one
                            // connection (the pool's had the default 100 each).
                            .statement_cache_capacity(WRITER_STATEMENTS),
                    )
                    .await
                    .map_err(|e| DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e.into())))?;
                Ok::<_, DbErr>(Some(SqlxSqliteConnector::from_sqlx_sqlite_pool(writer)))
            })
            .await?;
        Ok(writer.as_ref())
    }
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
    FileWriter::of(pool).turn().await
}
