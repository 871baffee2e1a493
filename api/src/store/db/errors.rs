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
/// The cause (logged, never answered) carries what to set where `hint` knows it.
impl From<sea_orm::DbErr> for crate::error::ApiError {
    fn from(e: sea_orm::DbErr) -> Self {
        let cause = with_hint(e.to_string());
        if is_transient(&e) {
            crate::error::ApiError::Unavailable {
                subsystem: crate::error::Subsystem::Database,
                cause,
            }
        } else {
            crate::error::ApiError::Internal(cause)
        }
    }
}

/// What to change, for a database error that says the configuration is wrong rather than
/// the database. Both mean the service was not told it sits behind a transaction-mode
/// pooler: a statement named by sqlx (`sqlx_s_1`) found already prepared, or missing, on its
/// connection (the pooler handed the connection's statements to other clients'
/// transactions), and PgBouncer refusing the session settings a direct connection sends
/// at start-up (`unsupported startup parameter`).
pub fn hint(error: &str) -> Option<&'static str> {
    if error.contains("WALLET_DATABASE_POOLER") {
        return None;
    }
    let named = error.contains("prepared statement \"sqlx_s_")
        && (error.contains("already exists") || error.contains("does not exist"));
    let refused_settings = error.contains("unsupported startup parameter");
    (named || refused_settings).then_some(
        "WALLET_DATABASE_URL goes through a transaction-mode pooler such as PgBouncer: set \
         WALLET_DATABASE_POOLER=transaction, and WALLET_DATABASE_DIRECT_URL to PostgreSQL itself",
    )
}

/// `error` followed by what to change, where `hint` knows it.
pub fn with_hint(error: String) -> String {
    match hint(&error) {
        Some(h) => format!("{error} ({h})"),
        None => error,
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

#[cfg(test)]
mod tests {
    use super::hint;

    #[test]
    fn a_statement_left_on_a_pooled_session_names_the_pooler_setting() {
        for e in [
            "Query Error: error returned from database: prepared statement \"sqlx_s_1\" already exists",
            "Execution Error: error returned from database: prepared statement \"sqlx_s_12\" does not exist",
            "Connection Error: error returned from database: unsupported startup parameter: extra_float_digits",
        ] {
            assert!(
                hint(e).is_some_and(|h| h.contains("WALLET_DATABASE_POOLER=transaction")),
                "{e}"
            );
        }
        assert_eq!(hint("relation \"wallets\" does not exist"), None);
        assert_eq!(hint("connection refused"), None);
    }
}
