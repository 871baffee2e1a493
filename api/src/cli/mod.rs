//! The operator command lines (`wallet-api`, `wallet-worker`): what they print and how
//! they exit. Scripts depend on both, so both are fixed here once:
//!
//! - a readable table by default, stable JSON with `--json`;
//! - exit codes: 0 done, 1 error, 2 usage (a bad flag or filter value, named with the
//!   allowed ones), 3 partial (a bulk action that failed for some items and did the rest);
//! - a closed pipe ends the output quietly (`infra::stdout`).
pub mod dlq;
pub mod table;

use std::process::ExitCode;

use migration::MigratorTrait;

use crate::{
    config::Config,
    error::{ApiError, ErrorCode},
    store::{self, Db},
};

/// How the audit log names the shell user who ran a command.
pub fn actor() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "operator".into())
    )
}

/// Why a command did not simply succeed, with its exit code.
#[derive(Debug)]
pub enum Failure {
    /// 1: it could not do what was asked (database down, no such letter ...).
    Error(String),
    /// 2: it was asked wrongly; nothing was done.
    Usage(String),
    /// 3: a bulk action that did some and failed some; the output says which.
    Partial(String),
}

impl Failure {
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Failure::Error(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Partial(_) => 3,
        })
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Error(m) | Failure::Usage(m) | Failure::Partial(m) => m,
        }
    }
}

/// The database of the service this command acts on (its dead letters, its ledger). Never
/// made here: in a directory with no embedded database the command says where it looked
/// and what to set, rather than creating an empty file and failing on a missing table; a
/// database that was never migrated, or is behind this binary, says so too.
pub async fn service_database(config: &Config) -> Result<Db, Failure> {
    let url = config.effective_database_url();
    if let Some(file) = store::db::sqlite_file(&url)
        && !std::path::Path::new(&file).exists()
    {
        let looked = if config.database_url.is_some() {
            "WALLET_DATABASE_URL names it".to_string()
        } else {
            format!(
                "with WALLET_DATABASE_URL unset, commands read the embedded service's file in \
                 WALLET_DATA_DIR ({})",
                config.data_dir.display()
            )
        };
        return Err(Failure::Error(format!(
            "no database at {file} ({looked}). Run the command in the directory the service \
             runs in, or set WALLET_DATABASE_URL (or WALLET_DATA_DIR) to the service's database"
        )));
    }
    let db = store::connect(config).await?;
    let described = store::db::describe_database(&url);
    let pending = migration::Migrator::get_pending_migrations(db.connection())
        .await
        .map_err(|e| {
            Failure::Error(format!(
                "reading the schema of {described}: {}",
                explain(&e.to_string())
            ))
        })?;
    let applied = migration::Migrator::get_applied_migrations(db.connection())
        .await
        .map(|a| a.len())
        .unwrap_or(0);
    if !pending.is_empty() {
        store::close(&db).await;
        let what = if applied == 0 {
            "has no wallet schema (it was never migrated)".to_string()
        } else {
            format!("is {} migrations behind this binary", pending.len())
        };
        return Err(Failure::Error(format!(
            "{described} {what}: run `wallet-api migrate` with the same settings, or point \
             WALLET_DATABASE_URL at the service's database"
        )));
    }
    Ok(db)
}

/// A cause, with what to set where the store recognises it.
fn explain(cause: &str) -> String {
    store::db::errors::with_hint(cause.to_string())
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure::of(&e)
    }
}

impl Failure {
    /// `e` in an operator's words.
    pub fn of(e: &ApiError) -> Failure {
        // An operator at a shell reads the cause; "retry with the same Idempotency-Key" is
        // the HTTP caller's advice, not theirs.
        match e {
            ApiError::Internal(cause) => return Failure::Error(explain(cause)),
            ApiError::Unavailable { subsystem, cause } => {
                return Failure::Error(format!(
                    "the {} did not answer: {}",
                    subsystem.as_str(),
                    explain(cause)
                ));
            }
            ApiError::Coded { .. } => {}
        }
        let body = e.to_body();
        let message = body["message"].as_str().unwrap_or("failed").to_string();
        if e.code() != ErrorCode::ValidationError {
            return Failure::Error(message);
        }
        let fields: Vec<String> = e
            .field_errors()
            .iter()
            .map(|f| format!("--{}: {}", f.field.replace('_', "-"), f.message))
            .collect();
        Failure::Usage(if fields.is_empty() {
            message
        } else {
            fields.join("\n")
        })
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Error(explain(&format!("{e:#}")))
    }
}

impl From<crate::config::ConfigError> for Failure {
    fn from(e: crate::config::ConfigError) -> Self {
        Failure::Usage(e.to_string())
    }
}

impl From<crate::domain::platform::tenancy::TenantError> for Failure {
    fn from(e: crate::domain::platform::tenancy::TenantError) -> Self {
        match e {
            crate::domain::platform::tenancy::TenantError::Invalid(..) => {
                Failure::Usage(e.to_string())
            }
            other => Failure::Error(other.to_string()),
        }
    }
}

impl From<sea_orm::DbErr> for Failure {
    fn from(e: sea_orm::DbErr) -> Self {
        Failure::Error(explain(&e.to_string()))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Error(e.to_string())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Error(e.to_string())
    }
}

/// The process's exit: prints a failure on stderr under the command's name.
pub fn finish(command: &str, r: Result<(), Failure>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("{command}: {}", f.message());
            f.exit_code()
        }
    }
}
