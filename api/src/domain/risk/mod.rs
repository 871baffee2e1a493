//! Risk controls at the till (docs/risk.md): what stops a caller guessing codes and what
//! stops a leaked credential draining a wallet fast.
//!
//! - `failures`: failed credentials (short codes, QR payloads, OTPs, balance-check lookups)
//!   counted per terminal, branch and merchant over a trailing window; past a threshold
//!   that terminal (or branch, or merchant) is refused credential entry for a while.
//! - `limits`: the velocity limits a merchant sets (per wallet, per terminal, per payment,
//!   per top-up), checked inside the payment's own transaction.
//! - `crossings`: each first crossing of a threshold, recorded and announced once by a
//!   `risk.limit_reached` event; `blocks`: those in force, which operators see and may clear
//!   (a failure block).
pub mod blocks;
pub mod crossings;
pub mod failures;
pub mod limits;

/// What a threshold is counted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Terminal,
    Branch,
    Merchant,
    Wallet,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Terminal => "terminal",
            Scope::Branch => "branch",
            Scope::Merchant => "merchant",
            Scope::Wallet => "wallet",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        [
            Scope::Terminal,
            Scope::Branch,
            Scope::Merchant,
            Scope::Wallet,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}
