//! Failed credentials, counted where they happen: per terminal (the one signed into the
//! terminal JWT; a caller without one counts against its API key, so renaming the terminal
//! in a request's context dodges nothing), per branch and per merchant, each over the same
//! trailing window. A terminal past its threshold is refused entry of codes that can be
//! guessed (RATE_LIMITED, `details.scope: "terminal"`) while the merchant's other terminals
//! go on; the branch and merchant thresholds are far higher, and a merchant's count never
//! includes another's.
//!
//! Each check runs outside the caller's database transaction: before it opens, or after
//! it ended.
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

use super::{Scope, crossings};
use crate::{
    config::Config,
    domain::credentials::scope::Acting,
    error::{ApiError, ErrorCode, RateLimitInfo},
    infra::kv::{FailureWindow, Kv},
    store::Db,
};

/// A credential entry that can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    ShortCode,
    Qr,
    Otp,
    /// A balance check, whatever its credential.
    BalanceCheck,
}

impl Entry {
    /// Whether a block refuses it: a short code (5 characters a person types) can be
    /// guessed. A QR payload is a 256-bit nonce nobody guesses, and an OTP is bound to its
    /// session, which locks after three wrong codes and whose sends are capped per order and
    /// wallet; a blocked terminal still takes them, and their failures are counted all the
    /// same. (So the common payment makes no Redis look-up for a block.)
    pub fn guessable(self) -> bool {
        matches!(self, Entry::ShortCode)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Entry::ShortCode => "short_code",
            Entry::Qr => "qr",
            Entry::Otp => "otp",
            Entry::BalanceCheck => "balance_check",
        }
    }

    /// Whether `e`, the refusal of an entry of this kind, means the credential was wrong
    /// (unknown, expired, used, bound elsewhere, a wrong OTP), as opposed to a refusal that
    /// says nothing about it (no funds, a validation error, an outage).
    pub fn failed_by(self, e: &ApiError) -> bool {
        match e.code() {
            ErrorCode::CredentialExpiredOrReplayed => true,
            ErrorCode::OtpInvalid => self == Entry::Otp,
            ErrorCode::NotFound => self == Entry::BalanceCheck,
            _ => false,
        }
    }
}

/// Where a credential was entered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Till {
    pub merchant_id: Uuid,
    pub is_sandbox: bool,
    pub branch_id: Option<Uuid>,
    /// `terminal:<id>` for a terminal JWT minted with one, else `key:<api key id>`.
    pub terminal: String,
}

impl Till {
    pub fn of(acting: &Acting) -> Till {
        Till {
            merchant_id: acting.merchant_id,
            is_sandbox: acting.is_sandbox,
            branch_id: acting.branch_id,
            terminal: acting.counted_terminal.clone(),
        }
    }
}

/// The rule a failure block is recorded under.
pub const RULE: &str = "credential_failures";

/// One of a till's windows, with what it counts.
struct Counted {
    scope: Scope,
    subject: String,
    window: FailureWindow,
}

/// The Redis key of a window (one hash slot per merchant: a till's windows go together).
pub fn window_key(merchant: Uuid, sandbox: bool, scope: Scope, subject: &str) -> String {
    let mode = if sandbox { "sandbox" } else { "live" };
    format!("risk:{{{merchant}}}:{mode}:{}:{subject}", scope.as_str())
}

pub struct Failures<'a> {
    pub kv: &'a Kv,
    pub config: &'a Config,
    pub db: &'a Db,
}

impl Failures<'_> {
    fn length(&self) -> Duration {
        Duration::from_secs(self.config.risk_failure_window_secs)
    }

    /// The window of `scope` and `subject` (an operator clears it).
    pub fn window(
        &self,
        merchant: Uuid,
        sandbox: bool,
        scope: Scope,
        subject: &str,
    ) -> Option<FailureWindow> {
        let threshold = match scope {
            Scope::Terminal => self.config.risk_terminal_failures,
            Scope::Branch => self.config.risk_branch_failures,
            Scope::Merchant => self.config.risk_merchant_failures,
            Scope::Wallet => return None,
        };
        Some(FailureWindow {
            key: window_key(merchant, sandbox, scope, subject),
            threshold,
            length: self.length(),
        })
    }

    fn windows(&self, till: &Till) -> Vec<Counted> {
        let m = till.merchant_id;
        let mut subjects = vec![(Scope::Terminal, till.terminal.clone())];
        if let Some(b) = till.branch_id {
            subjects.push((Scope::Branch, b.to_string()));
        }
        subjects.push((Scope::Merchant, m.to_string()));
        subjects
            .into_iter()
            .filter_map(|(scope, subject)| {
                let window = self.window(m, till.is_sandbox, scope, &subject)?;
                Some(Counted {
                    scope,
                    subject,
                    window,
                })
            })
            .collect()
    }

    /// RATE_LIMITED while the till's terminal, branch or merchant is at its threshold,
    /// naming the one that is blocked longest.
    pub async fn before(&self, till: &Till) -> Result<(), ApiError> {
        let counted = self.windows(till);
        let windows: Vec<FailureWindow> = counted.iter().map(|c| c.window.clone()).collect();
        let tallies = self.kv.failure_tallies(&windows).await?;
        let blocked = counted
            .iter()
            .zip(&tallies)
            .filter_map(|(c, t)| Some((c, t.blocked_for?)))
            .max_by_key(|(_, wait)| *wait);
        match blocked {
            Some((c, wait)) => Err(refusal(c, wait)),
            None => Ok(()),
        }
    }

    /// Counts a failed `entry` at `till`; a window it brings to its threshold is a crossing,
    /// recorded for operators and announced by `risk.limit_reached`.
    pub async fn failed(&self, till: &Till, entry: Entry) -> Result<(), ApiError> {
        let counted = self.windows(till);
        let windows: Vec<FailureWindow> = counted.iter().map(|c| c.window.clone()).collect();
        let note = format!(
            "{}:{}",
            entry.as_str(),
            crate::infra::current_request::request_id()
        );
        let tallies = self.kv.note_failure(&windows, &note).await?;
        let now = Utc::now();
        for (c, t) in counted.iter().zip(&tallies) {
            // Exactly at the threshold: the failure that crossed it (later ones are refused
            // before they are tried, so each crossing is seen once).
            if t.count != c.window.threshold {
                continue;
            }
            let until = now
                + chrono::Duration::from_std(t.blocked_for.unwrap_or_default()).unwrap_or_default();
            crossings::record(
                self.db,
                crossings::Crossing {
                    merchant_id: till.merchant_id,
                    is_sandbox: till.is_sandbox,
                    scope: c.scope,
                    subject: c.subject.clone(),
                    rule: RULE,
                    threshold: c.window.threshold as i64,
                    window_secs: c.window.length.as_secs() as i64,
                    observed: t.count as i64,
                    until,
                },
                now,
            )
            .await?;
        }
        Ok(())
    }

    /// After an entry was tried: counts it if `refused` says the credential was wrong.
    pub async fn after(
        &self,
        till: Option<&Till>,
        entry: Option<Entry>,
        refused: Option<&ApiError>,
    ) -> Result<(), ApiError> {
        match (till, entry, refused) {
            (Some(till), Some(entry), Some(e)) if entry.failed_by(e) => {
                self.failed(till, entry).await
            }
            _ => Ok(()),
        }
    }
}

fn refusal(c: &Counted, wait: Duration) -> ApiError {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let info = RateLimitInfo {
        limit: c.window.threshold,
        remaining: 0,
        reset_secs: secs,
        window_secs: c.window.length.as_secs(),
    };
    let message = match c.scope {
        Scope::Terminal => {
            "Too many failed credentials at this terminal; wait, or ask the customer to show a new code."
        }
        Scope::Branch => {
            "Too many failed credentials at this branch; wait before trying codes again."
        }
        _ => "Too many failed credentials at this merchant; wait before trying codes again.",
    };
    ApiError::rate_limited(info, secs)
        .with_message(message)
        .with_details(json!({
            "scope": c.scope.as_str(),
            "rule": RULE,
            "limit": info.limit,
            "window_seconds": info.window_secs,
            "remaining": 0,
            "reset_seconds": secs,
            "retry_after_seconds": secs,
        }))
}
