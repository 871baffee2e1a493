//! Persistence: the only place that builds queries. Every finder of tenant-owned data takes
//! the tenant (integration or merchant) so no query can forget it.
pub mod api_keys;
pub mod checkout;
pub mod db;
pub mod dead_letters;
pub mod disputes;
pub mod enrollments;
mod event_batch;
pub mod events;
pub mod idempotency;
pub mod incentives;
pub mod job_queue;
pub mod ledger;
pub mod operators;
pub mod outbox;
pub mod outbox_row;
pub mod payments;
pub mod pooler;
pub mod relay;
pub mod retention;
pub mod sandbox_messages;
pub mod tenancy;
pub mod topups;
pub mod wallets;
pub mod webhooks;
pub mod writes;

pub use db::{begin, close, connect, connect_direct, ping};
pub use pooler::Db;

/// `q` locking its rows until the transaction ends. On PostgreSQL that is `FOR UPDATE`;
/// SQLite has no row locks, and its IMMEDIATE write transaction already excludes every
/// other writer.
pub fn for_update<E: sea_orm::EntityTrait, C: sea_orm::ConnectionTrait>(
    c: &C,
    q: sea_orm::Select<E>,
) -> sea_orm::Select<E> {
    use sea_orm::QuerySelect;
    if c.get_database_backend() == sea_orm::DbBackend::Postgres {
        q.lock(sea_orm::sea_query::LockType::Update)
    } else {
        q
    }
}

/// True when `e` is a unique-constraint violation (a lost insert race), on either backend.
pub fn is_unique_violation(e: &sea_orm::DbErr) -> bool {
    matches!(
        e.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    )
}

/// A database error as the caller sees it: retryable (503) when transient, else internal.
/// Here rather than in `error`, because only the store knows which errors are transient.
impl From<sea_orm::DbErr> for crate::error::ApiError {
    fn from(e: sea_orm::DbErr) -> Self {
        if is_transient(&e) {
            crate::error::ApiError::Unavailable {
                subsystem: crate::error::Subsystem::Database,
                cause: e.to_string(),
            }
        } else {
            crate::error::ApiError::Internal(e.to_string())
        }
    }
}

/// True when `e` says the database is unreachable, overloaded or briefly locked: a retry
/// with the same Idempotency-Key can succeed, so it is answered as a retryable 503.
pub fn is_transient(e: &sea_orm::DbErr) -> bool {
    use sea_orm::{DbErr, RuntimeErr, sqlx};
    match e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        DbErr::Exec(RuntimeErr::SqlxError(se)) | DbErr::Query(RuntimeErr::SqlxError(se)) => {
            match &**se {
                sqlx::Error::Io(_)
                | sqlx::Error::Protocol(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed => true,
                sqlx::Error::Database(d) => {
                    if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                        // SQLITE_BUSY / SQLITE_LOCKED, with or without extended codes.
                        matches!(
                            d.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0) & 0xff,
                            5 | 6
                        )
                    } else {
                        // serialization failure, deadlock, lock timeout, admin shutdown
                        matches!(
                            d.code().as_deref(),
                            Some("40001" | "40P01" | "55P03" | "57P01")
                        )
                    }
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// The smallest UUIDv7 of the millisecond `t`: every id taken at or after `t` is at least
/// this.
pub fn uuid_v7_floor(t: chrono::DateTime<chrono::Utc>) -> uuid::Uuid {
    let ms = u64::try_from(t.timestamp_millis()).unwrap_or(0) & 0xFFFF_FFFF_FFFF;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = 0x70;
    b[8] = 0x80;
    uuid::Uuid::from_bytes(b)
}

/// `LOWER(col) LIKE '%text%'` with `%`, `_` and `\\` in `text` taken literally: a
/// case-insensitive "contains" that both backends run the same way (and PostgreSQL can
/// serve from a trigram index on `lower(col)`).
pub(crate) fn contains_any_case<C: sea_orm::sea_query::IntoColumnRef>(
    col: C,
    text: &str,
) -> sea_orm::sea_query::SimpleExpr {
    use sea_orm::sea_query::{Expr, ExprTrait, Func, LikeExpr};
    let escaped = text
        .to_lowercase()
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    Expr::expr(Func::lower(Expr::col(col))).like(LikeExpr::new(format!("%{escaped}%")).escape('\\'))
}
