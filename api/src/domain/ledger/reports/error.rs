//! Why a report run did not make its file.
use sea_orm::DbErr;

#[derive(Debug)]
pub enum RunError {
    /// The database failed: the job tries again, from the start.
    Db(DbErr),
    /// The report cannot be made as asked (it would not close, its stored parameters do not
    /// parse): the run fails now, without retries.
    Broken(String),
}

impl From<DbErr> for RunError {
    fn from(e: DbErr) -> Self {
        RunError::Db(e)
    }
}

/// A read shared with the API (liability, snapshots): its database failures are retried
/// like the run's own; anything it refuses is not.
impl From<crate::error::ApiError> for RunError {
    fn from(e: crate::error::ApiError) -> Self {
        match e {
            crate::error::ApiError::Coded { message, .. } => RunError::Broken(message),
            other => RunError::Db(DbErr::Custom(other.to_string())),
        }
    }
}
