//! The service's handle on its database, `Db`, and how its statements travel through a
//! transaction-mode pooler (PgBouncer with `pool_mode = transaction`, `WALLET_DATABASE_POOLER`).
//!
//! Such a pooler lends a server session to a client connection for one transaction and
//! takes it back as soon as the session reports itself idle. Two habits of sqlx do not
//! survive that:
//! - it sends a statement in two exchanges (Parse and Describe, then Bind and Execute), each
//!   ending in Sync; outside a transaction the second may reach another session than the
//!   first;
//! - it names prepared statements `sqlx_s_<n>`, counted per client connection, and never
//!   closes one it does not cache; the names one client left on a session clash with the
//!   next client's (`prepared statement "sqlx_s_1" already exists`).
//!
//! So through such a pooler:
//! - nothing is cached (`statement_cache_capacity(0)`): a statement is parsed where it runs;
//! - every statement runs inside a transaction, which keeps both exchanges on one session. A
//!   read on `Db` gets a transaction of its own (two round trips more than a direct read);
//! - every transaction opens with `opening`: `DEALLOCATE ALL` clears the names the session's
//!   previous client left, so a name in this transaction can only mean this transaction's
//!   statement, and `SET LOCAL` gives it the timeouts a direct connection gets at connect
//!   time, which the pooler will not pass on (it refuses startup options).
//!
//! Nothing else on the pooled connection outlives a transaction: advisory locks are
//! transaction-scoped (`pg_advisory_xact_lock`), and no `SET`, `LISTEN` or temporary table
//! is used there. Migrations and apalis (which listens) use the direct URL
//! (`WALLET_DATABASE_DIRECT_URL`).
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, ExecResult,
    QueryResult, Statement, TransactionTrait,
    sqlx::{self, PgPool, Postgres},
};

use crate::{config::Config, store::db::pg_txn::OnPool};

/// The service's database. Reads run on it directly; writes go through `store::begin`.
#[derive(Clone, Debug)]
pub struct Db {
    conn: DatabaseConnection,
    /// Through a transaction-mode pooler: the statements that open every transaction.
    opening: Option<Arc<str>>,
    /// A read replica's: where a statement that failed here runs again (`store::db::replica`).
    fallback: Option<Arc<Fallback>>,
}

#[derive(Debug)]
struct Fallback {
    primary: Db,
    /// Cleared when a statement failed here, so requests stop coming until a probe finds
    /// the replica well again.
    usable: Arc<AtomicBool>,
}

/// The settings every PostgreSQL session of the service runs with: a direct one gets them
/// as startup options, a transaction through a pooler with `SET LOCAL` (`opening`).
pub fn session_settings(cfg: &Config) -> [(&'static str, String); 3] {
    [
        // A request never waits on a row lock longer than this (one hot wallet's queue, a
        // payment behind a refund): past it the statement fails with 55P03, which is
        // answered as a retryable 503, instead of the caller waiting without bound.
        ("lock_timeout", format!("{}ms", cfg.db_lock_timeout_ms)),
        // A statement the server runs too long is cancelled there; a server that stopped
        // answering at all is bounded by the request deadline (`http::pipeline::middleware`).
        (
            "statement_timeout",
            format!("{}ms", cfg.db_statement_timeout_ms),
        ),
        // A transaction left open by a client that vanished mid-request (killed, cut off)
        // releases its row locks instead of holding them indefinitely.
        ("idle_in_transaction_session_timeout", "15000ms".to_string()),
    ]
}

/// What opens every transaction through a transaction-mode pooler, in one message.
pub fn opening(cfg: &Config) -> String {
    let mut sql = String::from("DEALLOCATE ALL");
    for (name, value) in session_settings(cfg) {
        sql.push_str(&format!("; SET LOCAL {name} = '{value}'"));
    }
    sql
}

impl Db {
    /// A database reached directly: every pooled connection is a session of its own.
    pub fn direct(conn: DatabaseConnection) -> Db {
        Db {
            conn,
            opening: None,
            fallback: None,
        }
    }

    /// A database reached through a transaction-mode pooler; `opening` starts every
    /// transaction.
    pub fn pooled(conn: DatabaseConnection, opening: String) -> Db {
        Db {
            conn,
            opening: Some(opening.into()),
            fallback: None,
        }
    }

    /// This replica, running a statement that fails on it again on `primary` (and clearing
    /// `usable`).
    pub fn falling_back_to(self, primary: Db, usable: Arc<AtomicBool>) -> Db {
        Db {
            fallback: Some(Arc::new(Fallback { primary, usable })),
            ..self
        }
    }

    /// Whether statements go through a transaction-mode pooler.
    pub fn is_pooled(&self) -> bool {
        self.opening.is_some()
    }

    /// The sea-orm connection underneath, for what is not a statement: its pool (sizes,
    /// the SQLite file) and closing it. A statement sent on it directly skips the pooler's
    /// discipline above.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.conn
    }

    /// Opens a transaction (for writes, use `store::begin`, which also takes SQLite's
    /// write turn).
    pub async fn begin(&self) -> Result<DatabaseTransaction, DbErr> {
        let txn = self.conn.begin().await?;
        if let Some(opening) = &self.opening {
            txn.execute_unprepared(opening).await?;
        }
        Ok(txn)
    }

    /// A write transaction on PostgreSQL (`store::begin`), opened as `begin` opens one.
    pub async fn begin_write_pg(&self) -> Result<crate::store::db::pg_txn::PgTxn, DbErr> {
        let pool: &PgPool = self.conn.get_postgres_connection_pool();
        crate::store::db::pg_txn::PgTxn::begin(pool, self.opening.as_deref()).await
    }

    /// A transaction on the PostgreSQL pool itself, for statements sent with sqlx directly
    /// (the outbox relay).
    pub async fn begin_pg(&self) -> Result<sqlx::Transaction<'static, Postgres>, sqlx::Error> {
        let pool: &PgPool = self.conn.get_postgres_connection_pool();
        let mut tx = pool.begin().await?;
        if let Some(opening) = &self.opening {
            sqlx::raw_sql(sqlx::AssertSqlSafe(opening.to_string()))
                .execute(&mut *tx)
                .await?;
        }
        Ok(tx)
    }
}

/// Ends the transaction a statement ran alone in (`Db` through a pooler).
async fn settle<T>(txn: DatabaseTransaction, out: Result<T, DbErr>) -> Result<T, DbErr> {
    match out {
        Ok(v) => {
            txn.commit().await?;
            Ok(v)
        }
        Err(e) => {
            // The statement's own error is the one worth reporting.
            let _ = txn.rollback().await;
            Err(e)
        }
    }
}

/// One statement on a `Db`, as `ConnectionTrait::$method`: alone in a transaction through a
/// pooler, and again on the primary when it failed on a replica.
macro_rules! one_statement {
    ($here:ident, $method:ident -> $out:ty) => {
        async fn $here(&self, stmt: Statement) -> Result<$out, DbErr> {
            let again = self.fallback.as_ref().map(|_| stmt.clone());
            let out = if self.opening.is_none() {
                match self.pg_pool() {
                    Some(pool) => OnPool(pool).$method(stmt).await,
                    None => self.conn.$method(stmt).await,
                }
            } else {
                let txn = self.begin().await?;
                let out = txn.$method(stmt).await;
                settle(txn, out).await
            };
            match (out, again) {
                (Err(e), Some(stmt)) => match self.fallback_for(&e) {
                    Some(primary) => primary.$method(stmt).await,
                    None => Err(e),
                },
                (out, _) => out,
            }
        }
    };
}

impl Db {
    one_statement!(execute_here, execute_raw -> ExecResult);
    one_statement!(query_one_here, query_one_raw -> Option<QueryResult>);
    one_statement!(query_all_here, query_all_raw -> Vec<QueryResult>);

    /// The PostgreSQL pool, whose statements `one_statement` sends itself (`OnPool`).
    fn pg_pool(&self) -> Option<&PgPool> {
        (self.conn.get_database_backend() == DbBackend::Postgres)
            .then(|| self.conn.get_postgres_connection_pool())
    }

    /// The primary a replica's failed statement runs on again, if this is a replica and
    /// the failure is one the primary may not share.
    fn fallback_for(&self, e: &DbErr) -> Option<&Db> {
        let f = self.fallback.as_ref()?;
        if !crate::store::db::errors::is_transient(e) {
            return None;
        }
        if f.usable.swap(false, Ordering::Relaxed) {
            tracing::warn!(error = %e, "a read failed on the replica: lag-tolerant reads go to the primary");
        }
        metrics::counter!(crate::infra::telemetry::metrics::DB_REPLICA_FALLBACKS).increment(1);
        Some(&f.primary)
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for Db {
    fn get_database_backend(&self) -> DbBackend {
        self.conn.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.execute_here(stmt).await
    }

    /// Sent as one simple-protocol message, which a pooler forwards whole to one session:
    /// it needs no transaction of its own.
    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.conn.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.query_one_here(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.query_all_here(stmt).await
    }

    fn support_returning(&self) -> bool {
        self.conn.support_returning()
    }
}
