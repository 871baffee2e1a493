//! Stored-value accounting (docs/accounting.md): the liability at an instant is what the
//! ledger's entries add up to, class by class, and equals the wallets' balances.
pub mod aging;
pub mod liability;
pub mod property;
pub mod reports;
pub mod snapshots;
