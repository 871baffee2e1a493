//! A write transaction on PostgreSQL that the store drives itself: one pooled connection,
//! `BEGIN` to `COMMIT`, each statement sent with sqlx as sea-orm would send it.
//!
//! Why not sea-orm's `DatabaseTransaction`: every payment opens one, and its opening went
//! through three boxed, instrumented futures that moved each other along (about 44,000
//! instructions of memory copies per payment under callgrind, `bench/payments/results`),
//! and every statement cloned its values before binding them. The statements, their
//! binding, the row and result types, the transaction manager's calls and the errors'
//! kinds are sea-orm's own (`QueryResult`, `ExecResult`, `sqlx_error_to_*`), so everything
//! above `ConnectionTrait` reads and classifies them as before.
use sea_orm::{
    ConnAcquireErr, ConnectionTrait, DbBackend, DbErr, ExecResult, QueryResult, RuntimeErr,
    Statement,
    sqlx::{self, PgConnection, PgPool, Postgres, pool::PoolConnection},
};
use sea_query_sqlx::SqlxValues;
use sqlx_core::transaction::TransactionManager;
use tokio::sync::Mutex;

type Manager = <Postgres as sqlx::Database>::TransactionManager;

pub struct PgTxn {
    conn: Mutex<PoolConnection<Postgres>>,
    /// Until committed or rolled back: a transaction dropped open is rolled back by the
    /// connection before its next use (sqlx's `start_rollback`), as sea-orm's is.
    open: bool,
}

impl PgTxn {
    /// Takes a connection of `pool` and opens a transaction on it; `opening`, through a
    /// transaction-mode pooler, runs first (`store::db::pooler`).
    pub async fn begin(pool: &PgPool, opening: Option<&str>) -> Result<PgTxn, DbErr> {
        let mut conn = acquire(pool).await?;
        Manager::begin(&mut conn, None)
            .await
            .map_err(sqlx_error_to_query_err)?;
        let txn = PgTxn {
            conn: Mutex::new(conn),
            open: true,
        };
        if let Some(opening) = opening {
            txn.execute_unprepared(opening).await?;
        }
        Ok(txn)
    }

    pub async fn commit(mut self) -> Result<(), DbErr> {
        Manager::commit(self.conn.get_mut())
            .await
            .map_err(sqlx_error_to_query_err)?;
        self.open = false;
        Ok(())
    }

    pub async fn rollback(mut self) -> Result<(), DbErr> {
        Manager::rollback(self.conn.get_mut())
            .await
            .map_err(sqlx_error_to_query_err)?;
        self.open = false;
        Ok(())
    }
}

impl Drop for PgTxn {
    fn drop(&mut self) {
        if self.open {
            Manager::start_rollback(self.conn.get_mut());
        }
    }
}

// sea-orm's own mapping of sqlx's errors (its `sqlx_common`, not exported), so that
// `store::db::errors` classifies them as it does sea-orm's.
fn sqlx_error_to_exec_err(e: sqlx::Error) -> DbErr {
    DbErr::Exec(RuntimeErr::SqlxError(e.into()))
}

fn sqlx_error_to_query_err(e: sqlx::Error) -> DbErr {
    DbErr::Query(RuntimeErr::SqlxError(e.into()))
}

/// A connection of `pool`. sqlx's `acquire` future is some 14 KiB (it holds the opening of a
/// new connection); awaited in place it made every future that awaits a statement or a
/// transaction as large, up to the request's, and poem's layers and the idempotency
/// wrapper copy those each time they move them. Boxed, it is copied once, here. Under
/// callgrind a copy over 8 KiB costs about ten times the instructions per byte of a smaller
/// one, so the futures above are kept under that too: the payment itself, its rare paths
/// (limits, cashback), SQLite's begin and the request's layers below `NoteWritesEp` are boxed.
async fn acquire(pool: &PgPool) -> Result<PoolConnection<Postgres>, DbErr> {
    Box::pin(pool.acquire())
        .await
        .map_err(sqlx_conn_acquire_err)
}

fn sqlx_conn_acquire_err(e: sqlx::Error) -> DbErr {
    match e {
        sqlx::Error::PoolTimedOut => DbErr::ConnectionAcquire(ConnAcquireErr::Timeout),
        sqlx::Error::PoolClosed => DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed),
        e => DbErr::Conn(RuntimeErr::SqlxError(e.into())),
    }
}

/// The statement as sqlx sends it, taking its text and values instead of cloning them.
fn query(stmt: Statement) -> sqlx::query::Query<'static, Postgres, SqlxValues> {
    sqlx::query_with(
        sqlx::AssertSqlSafe(stmt.sql),
        SqlxValues(stmt.values.unwrap_or(sea_orm::Values(Vec::new()))),
    )
}

// One statement on a connection, as sea-orm's pool sends it: shared by the transaction and
// the pool's own statements.
async fn execute_on(conn: &mut PgConnection, stmt: Statement) -> Result<ExecResult, DbErr> {
    query(stmt)
        .execute(conn)
        .await
        .map(Into::into)
        .map_err(sqlx_error_to_exec_err)
}

async fn query_one_on(
    conn: &mut PgConnection,
    stmt: Statement,
) -> Result<Option<QueryResult>, DbErr> {
    query(stmt)
        .fetch_optional(conn)
        .await
        .map(|row| row.map(Into::into))
        .map_err(sqlx_error_to_query_err)
}

async fn query_all_on(conn: &mut PgConnection, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
    query(stmt)
        .fetch_all(conn)
        .await
        .map(|rows| rows.into_iter().map(Into::into).collect())
        .map_err(sqlx_error_to_query_err)
}

/// One statement on a connection of the pool, outside a transaction: a read on `Db`
/// reached directly (`store::db::pooler`). As sea-orm's pool sends it, without the frames
/// its future is moved through (about 45,000 instructions of copies for one read).
pub struct OnPool<'a>(pub &'a PgPool);

impl OnPool<'_> {
    pub async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        execute_on(&mut *acquire(self.0).await?, stmt).await
    }

    pub async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        query_one_on(&mut *acquire(self.0).await?, stmt).await
    }

    pub async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        query_all_on(&mut *acquire(self.0).await?, stmt).await
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for PgTxn {
    fn get_database_backend(&self) -> DbBackend {
        DbBackend::Postgres
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        execute_on(&mut **self.conn.lock().await, stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        let mut conn = self.conn.lock().await;
        sqlx::Executor::execute(&mut **conn, sqlx::AssertSqlSafe(sql.to_owned()))
            .await
            .map(Into::into)
            .map_err(sqlx_error_to_exec_err)
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        query_one_on(&mut **self.conn.lock().await, stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        query_all_on(&mut **self.conn.lock().await, stmt).await
    }

    fn support_returning(&self) -> bool {
        true
    }
}
