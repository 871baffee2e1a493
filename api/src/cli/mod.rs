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

use crate::error::{ApiError, ErrorCode};

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

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
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
        Failure::Error(format!("{e:#}"))
    }
}

impl From<crate::config::ConfigError> for Failure {
    fn from(e: crate::config::ConfigError) -> Self {
        Failure::Usage(e.to_string())
    }
}

impl From<crate::domain::tenancy::TenantError> for Failure {
    fn from(e: crate::domain::tenancy::TenantError) -> Self {
        match e {
            crate::domain::tenancy::TenantError::Invalid(..) => Failure::Usage(e.to_string()),
            other => Failure::Error(other.to_string()),
        }
    }
}

impl From<sea_orm::DbErr> for Failure {
    fn from(e: sea_orm::DbErr) -> Self {
        Failure::Error(e.to_string())
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
