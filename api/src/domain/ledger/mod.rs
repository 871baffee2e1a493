//! The wallet ledger's rules, as plain functions over plain values: how a debit is split
//! across promotional grants and actual money, and how a refund is returned. The posting
//! of the result as balanced double-entry rows lives with the payments issue (#4); these
//! rules are what every posting path must agree on, so they are written and tested once.
pub mod plan;

pub use plan::{DebitPlan, GrantState, GrantView, RefundPlan, Shortfall, plan_debit, plan_refund};
