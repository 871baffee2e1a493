pub mod errors;
pub mod partitions;
pub mod pg_txn;
pub mod pooler;
pub mod positional;
pub mod replica;
pub mod retention;
pub(in crate::store) mod sqlite_file;
pub mod template;
pub mod writes;
use std::time::Duration;

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, ExecResult, QueryResult, SqliteTransactionMode, Statement, TransactionOptions,
    TransactionTrait,
};

use crate::config::{Config, Pooler};
use crate::store::db::pg_txn::PgTxn;
use crate::store::db::pooler::Db;
pub use crate::store::db::sqlite_file::{CHECKPOINT_EVERY, WriteTurn, checkpoint, write_turn};
use crate::store::db::sqlite_file::{FileWriter, WAL_BACKSTOP_PAGES};
use crate::store::db::writes::Writes;

/// The service's database at `WALLET_DATABASE_URL`, through the pooler if one is configured.
pub async fn connect(cfg: &Config) -> anyhow::Result<Db> {
    let url = cfg.effective_database_url();
    let pooled = cfg.database_pooler == Pooler::Transaction;
    let conn = open(cfg, &url, cfg.db_max_connections, pooled, false).await?;
    Ok(if pooled {
        Db::pooled(conn, crate::store::db::pooler::opening(cfg))
    } else {
        Db::direct(conn)
    })
}

/// A session of the service's own (`WALLET_DATABASE_DIRECT_URL`, else the database URL),
/// for migrations and the job queue; `max` connections.
pub async fn connect_direct(cfg: &Config, max: u32) -> anyhow::Result<DatabaseConnection> {
    open(cfg, &cfg.direct_database_url(), max, false, false).await
}

/// The read replica at `WALLET_DATABASE_REPLICA_URL`, if one is configured, reached the way
/// the primary is. Connected lazily: a replica that is down when the process starts only
/// means its reads go to the primary until it answers.
pub async fn connect_replica(cfg: &Config) -> anyhow::Result<Option<Db>> {
    let Some(url) = &cfg.database_replica_url else {
        return Ok(None);
    };
    let pooled = cfg.database_pooler == Pooler::Transaction;
    let conn = open(cfg, url, cfg.db_max_connections, pooled, true).await?;
    Ok(Some(if pooled {
        Db::pooled(conn, crate::store::db::pooler::opening(cfg))
    } else {
        Db::direct(conn)
    }))
}

async fn open(
    cfg: &Config,
    url: &str,
    max: u32,
    pooled: bool,
    lazy: bool,
) -> anyhow::Result<DatabaseConnection> {
    if url.starts_with("sqlite:") && cfg.database_url.is_none() {
        std::fs::create_dir_all(&cfg.data_dir)?;
    }
    let mut opts = ConnectOptions::new(url.to_string());
    opts.max_connections(max)
        .min_connections(if lazy { 0 } else { 1 })
        .connect_lazy(lazy)
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
                .pragma("wal_autocheckpoint", WAL_BACKSTOP_PAGES.to_string())
        });
    }
    if url.starts_with("postgres") && pooled {
        // Through a transaction-mode pooler (`store::db::pooler`): no statement outlives its
        // transaction, and the pooler refuses startup options, so the timeouts below are
        // set in every transaction instead.
        opts.map_sqlx_postgres_opts(|o| o.statement_cache_capacity(0).extra_float_digits(None));
    } else if url.starts_with("postgres") {
        let settings = crate::store::db::pooler::session_settings(cfg);
        opts.map_sqlx_postgres_opts(move |o| {
            o.options(settings.iter().map(|(k, v)| (*k, v.as_str())))
        });
    }
    let db = Database::connect(opts).await.map_err(|e| {
        let var = if Some(url) == cfg.database_replica_url.as_deref() {
            "WALLET_DATABASE_REPLICA_URL"
        } else if pooled || url == cfg.effective_database_url() {
            "WALLET_DATABASE_URL"
        } else {
            "WALLET_DATABASE_DIRECT_URL"
        };
        anyhow::anyhow!(
            "cannot open the database {} ({var}): {e}",
            describe_database(url)
        )
    })?;
    Ok(db)
}

/// The file a `sqlite:` URL names (without its `?` options); None for any other URL.
pub fn sqlite_file(url: &str) -> Option<&str> {
    let path = url.strip_prefix("sqlite:")?.trim_start_matches("//");
    path.split('?').next()
}

/// Where a database URL points, for an operator reading an error: host, port and database
/// name, or the SQLite file; never the user's password.
pub fn describe_database(url: &str) -> String {
    if let Some(file) = sqlite_file(url) {
        return format!("SQLite file {file}");
    }
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "postgres at {}:{} database {:?} as user {:?}",
            u.host_str().unwrap_or("(no host)"),
            u.port().unwrap_or(5432),
            u.path().trim_start_matches('/'),
            u.username()
        ),
        Err(_) => "(an unparseable URL)".to_string(),
    }
}

fn sqlx_sqlite_journal_wal() -> sea_orm::sqlx::sqlite::SqliteJournalMode {
    sea_orm::sqlx::sqlite::SqliteJournalMode::Wal
}

/// A write transaction. On SQLite it also holds the database file's write gate until it
/// commits, rolls back or is dropped.
pub struct WriteTxn {
    // Declared first so it is dropped first: the gate opens after the transaction ended.
    txn: Txn,
    /// Writes the work held back (see `store::db::writes`): they reach the database in one
    /// batch before the commit, with whatever the transaction's owner adds to them (the
    /// idempotency record).
    deferred: std::sync::Mutex<Writes>,
    _turn: Option<WriteTurn>,
}

/// The transaction underneath: sea-orm's on SQLite, the store's own on PostgreSQL
/// (`pg_txn`, for what sea-orm's cost every payment).
enum Txn {
    Orm(DatabaseTransaction),
    Pg(PgTxn),
}

impl WriteTxn {
    fn new(txn: Txn, turn: Option<WriteTurn>) -> Self {
        WriteTxn {
            txn,
            deferred: Default::default(),
            _turn: turn,
        }
    }

    /// Holds `writes` back for the batch sent before the commit.
    pub fn defer(&self, writes: Writes) {
        self.deferred_writes().append(writes);
    }

    /// The writes held back so far, for the owner that sends them with its own.
    pub fn take_deferred(&self) -> Writes {
        std::mem::take(&mut *self.deferred_writes())
    }

    fn deferred_writes(&self) -> std::sync::MutexGuard<'_, Writes> {
        // Writes held back are whole statements: a panic elsewhere leaves none half-made.
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends the writes still held back, then commits.
    pub async fn commit(self) -> Result<(), DbErr> {
        let deferred = self.take_deferred();
        if !deferred.is_empty() {
            deferred.flush(&self).await?;
        }
        match self.txn {
            Txn::Orm(t) => t.commit().await,
            Txn::Pg(t) => t.commit().await,
        }
    }

    pub async fn rollback(self) -> Result<(), DbErr> {
        match self.txn {
            Txn::Orm(t) => t.rollback().await,
            Txn::Pg(t) => t.rollback().await,
        }
    }
}

/// `$call` on whichever transaction is underneath.
macro_rules! on_txn {
    ($self:ident, $t:ident => $call:expr) => {
        match &$self.txn {
            Txn::Orm($t) => $call,
            Txn::Pg($t) => $call,
        }
    };
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTxn {
    fn get_database_backend(&self) -> DbBackend {
        on_txn!(self, t => t.get_database_backend())
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        on_txn!(self, t => t.execute_raw(stmt).await)
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        on_txn!(self, t => t.execute_unprepared(sql).await)
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        on_txn!(self, t => t.query_one_raw(stmt).await)
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        on_txn!(self, t => t.query_all_raw(stmt).await)
    }

    fn support_returning(&self) -> bool {
        on_txn!(self, t => t.support_returning())
    }
}

/// Opens a write transaction. On SQLite it is IMMEDIATE, so concurrent writers queue on the
/// database lock at BEGIN instead of failing at COMMIT, and it runs on the file's own writer
/// connection (see `FileWriter`); PostgreSQL serialises on row locks.
pub async fn begin(db: &Db) -> Result<WriteTxn, DbErr> {
    let started = std::time::Instant::now();
    let txn = begin_untimed(db).await;
    metrics::histogram!(crate::infra::telemetry::metrics::DB_POOL_ACQUIRE)
        .record(started.elapsed().as_secs_f64());
    txn
}

/// Runs `work` in one write transaction, committed when it succeeds: the tools without an
/// idempotency record (console forms, the CLI) run the domain's transactional steps so.
pub async fn in_transaction<T, E>(
    db: &Db,
    work: impl AsyncFnOnce(&WriteTxn) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<DbErr>,
{
    let txn = begin(db).await?;
    let out = work(&txn).await?;
    txn.commit().await?;
    Ok(out)
}

async fn begin_untimed(db: &Db) -> Result<WriteTxn, DbErr> {
    match db.get_database_backend() {
        // Boxed: its futures (the file's writer, sea-orm's begin) are kilobytes that every
        // future awaiting a write transaction on PostgreSQL would otherwise carry too.
        DbBackend::Sqlite => Box::pin(begin_sqlite(db)).await,
        _ => Ok(WriteTxn::new(Txn::Pg(db.begin_write_pg().await?), None)),
    }
}

/// `begin` on SQLite: the file's write turn, then an IMMEDIATE transaction on its writer.
async fn begin_sqlite(db: &Db) -> Result<WriteTxn, DbErr> {
    let db = db.connection();
    let pool = db.get_sqlite_connection_pool();
    let file = FileWriter::of(pool);
    let turn = file.turn().await?;
    let writer = file.writer(pool).await?;
    let txn = writer
        .unwrap_or(db)
        .begin_with_options(TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        })
        .await?;
    Ok(WriteTxn::new(Txn::Orm(txn), Some(turn)))
}

/// Connections the pool holds and how many of them are idle, for the pool gauges.
pub fn pool_stats(db: &Db) -> (u32, usize) {
    let db = db.connection();
    match db.get_database_backend() {
        DbBackend::Sqlite => {
            let p = db.get_sqlite_connection_pool();
            (p.size(), p.num_idle())
        }
        _ => {
            let p = db.get_postgres_connection_pool();
            (p.size(), p.num_idle())
        }
    }
}

/// Ends the database sessions cleanly: a process that just exits leaves PostgreSQL to find
/// its sockets reset, one "could not receive data from client" log line per pooled
/// connection on every deploy. Waits a while for connections still checked out. A failure
/// here changes nothing the process did, so it is not reported.
pub async fn close(db: &Db) {
    let _ = tokio::time::timeout(Duration::from_secs(5), db.connection().clone().close()).await;
}

pub async fn ping(db: &Db, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, db.execute_unprepared("SELECT 1")).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_is_described_without_its_password() {
        let d = super::describe_database(
            "postgres://wallet:s3cret@db.internal:6432/wallet_prod?sslmode=require",
        );
        assert_eq!(
            d,
            "postgres at db.internal:6432 database \"wallet_prod\" as user \"wallet\""
        );
        assert!(!d.contains("s3cret"));
        assert_eq!(
            super::describe_database("sqlite://./wallet-data/wallet.db?mode=rwc"),
            "SQLite file ./wallet-data/wallet.db"
        );
    }

    use std::{path::Path, pin::pin, task::Poll};

    use std::path::PathBuf;

    use futures::poll;
    use sea_orm::sqlx::{
        SqlitePool,
        sqlite::{SqliteConnectOptions, SqlitePoolOptions},
    };
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

    /// The service's own connection to a fresh file, as `connect` makes it, with a pool of
    /// `connections`.
    async fn service_db(connections: u32) -> Db {
        let dir = std::env::temp_dir().join(format!("wallet-writer-{}", Uuid::now_v7()));
        let cfg = Config {
            data_dir: dir,
            db_max_connections: connections,
            db_acquire_timeout_ms: 500,
            ..Config::default()
        };
        connect(&cfg).await.unwrap()
    }

    #[tokio::test]
    async fn write_transactions_go_through_one_connection_of_their_own() {
        let db = service_db(2).await;
        let txn = begin(&db).await.unwrap();
        // A temporary table lives on the connection that made it.
        txn.execute_unprepared("CREATE TEMP TABLE mine (x INTEGER)")
            .await
            .unwrap();
        txn.commit().await.unwrap();

        // Every connection of the pool busy (readers, say): a writer does not wait for one.
        let pool = db.connection().get_sqlite_connection_pool();
        let held = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
        let txn = begin(&db).await.unwrap();
        let seen = row(
            &txn,
            "SELECT COUNT(*) FROM temp.sqlite_master WHERE name = 'mine'",
        )
        .await
        .try_get_by_index::<i64>(0)
        .unwrap();
        assert_eq!(seen, 1, "the second write ran on another connection");
        txn.commit().await.unwrap();
        drop(held);
    }

    /// (frames in the WAL, frames of it copied to the database file), after copying what
    /// it can.
    async fn wal(db: &DatabaseConnection) -> (i64, i64) {
        let r = row(db, "PRAGMA wal_checkpoint(PASSIVE)").await;
        (
            r.try_get_by_index::<i64>(1).unwrap(),
            r.try_get_by_index::<i64>(2).unwrap(),
        )
    }

    async fn row<C: ConnectionTrait>(c: &C, sql: &str) -> QueryResult {
        c.query_one_raw(Statement::from_string(DbBackend::Sqlite, sql))
            .await
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn writers_leave_the_wal_to_the_checkpoint_which_lets_the_next_writer_start_it_over() {
        let db = service_db(4).await;
        let write = |sql: &'static str| {
            let db = db.clone();
            async move {
                let txn = begin(&db).await.unwrap();
                txn.execute_unprepared(sql).await.unwrap();
                txn.commit().await.unwrap();
            }
        };
        let autocheckpoint = row(&db, "PRAGMA wal_autocheckpoint")
            .await
            .try_get_by_index::<i64>(0)
            .unwrap();
        assert_eq!(autocheckpoint, i64::from(WAL_BACKSTOP_PAGES));
        write("CREATE TABLE t (x BLOB)").await;
        // About 2,300 pages: past SQLite's default autocheckpoint of 1,000, which would
        // have had a writer copy them inside its commit and start the WAL over.
        for _ in 0..650 {
            write("INSERT INTO t VALUES (randomblob(6000))").await;
        }
        // The WAL's size, untouched (measuring it through SQLite would copy it).
        let file = db
            .connection()
            .get_sqlite_connection_pool()
            .connect_options()
            .get_filename()
            .to_path_buf();
        let wal_bytes = std::fs::metadata(format!("{}-wal", file.display()))
            .unwrap()
            .len();
        assert!(
            wal_bytes > 1_000 * 4096,
            "a writer checkpointed: WAL of {wal_bytes} bytes"
        );

        checkpoint(&db).await.unwrap();
        write("INSERT INTO t VALUES (1)").await;
        let (frames, copied) = wal(db.connection()).await;
        assert!(frames < 10, "the WAL was not started over: {frames} frames");
        assert_eq!(frames, copied);
    }

    #[tokio::test]
    async fn a_checkpoint_of_an_in_memory_database_does_nothing() {
        let db = Db::direct(Database::connect("sqlite::memory:").await.unwrap());
        let txn = begin(&db).await.unwrap();
        txn.execute_unprepared("CREATE TABLE t (x INTEGER)")
            .await
            .unwrap();
        txn.commit().await.unwrap();
        checkpoint(&db).await.unwrap();
        db.execute_unprepared("INSERT INTO t VALUES (1)")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_write_transaction_holds_the_turn_until_it_ends() {
        let url = format!("sqlite://{}?mode=rwc", temp_file().display());
        let db = Db::direct(Database::connect(&url).await.unwrap());
        let txn = begin(&db).await.unwrap();
        txn.execute_unprepared("CREATE TABLE t (x INTEGER)")
            .await
            .unwrap();
        let mut other = pin!(write_turn(db.connection().get_sqlite_connection_pool()));
        assert!(poll!(&mut other).is_pending());
        txn.commit().await.unwrap();
        let other = other.await.unwrap();
        drop(other);

        let txn = begin(&db).await.unwrap();
        let mut other = pin!(write_turn(db.connection().get_sqlite_connection_pool()));
        assert!(poll!(&mut other).is_pending());
        drop(txn);
        assert!(matches!(poll!(&mut other), Poll::Ready(Ok(_))));
    }
}
