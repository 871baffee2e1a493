//! What a database error means to the caller: a duplicate, or worth retrying.

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
