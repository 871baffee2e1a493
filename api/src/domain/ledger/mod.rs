//! The wallet ledger's rules, as plain functions over plain values: how a debit is split
//! across promotional grants and actual money, and how a refund is returned.
//!
//! The posting side (`posting`, persisted by `store::ledger`):
//!
//! - **Accounts** (`posting::Account`): a wallet's `wallet_actual` account, one
//!   `promo_grant` account per grant (`promo_grant_locked` while the grant is locked), the
//!   wallet's `wallet_pending_topup` for top-ups not yet settled, and the merchant's counter-accounts, one per currency
//!   through the entries' currency: `merchant_clearing` (money spent from and returned to
//!   wallets), `merchant_promo_funding` (promotional credit it issues),
//!   `merchant_promo_forfeit` (refunded promo whose grant had ended) and
//!   `merchant_adjustment` (operators' manual corrections), `merchant_topup`,
//!   `merchant_pending_topup`, and `merchant_escrow` (one per wallet: a lapsed
//!   enrollment's money held for the customer). Which accounts hold customer value, and of
//!   which class, is `classes::ValueClass` (docs/accounting.md).
//! - **A posting** is one business event about one wallet (payment, refund, void, credit
//!   adjustment, grant accrual, release, expiry, clawback ...) with two or more **entries**,
//!   stamped with the tenant's clock (a sandbox's test clock); each entry moves a
//!   signed amount on one account and the entries of a posting sum to zero per currency.
//!   Entries are append-only; a correction is a new posting.
//! - **Balances** (`actual_minor`, each grant's `remaining_minor`) are columns updated in
//!   the posting's transaction under a row lock on the wallet (`SELECT … FOR UPDATE` on
//!   PostgreSQL, the IMMEDIATE transaction on SQLite); a check recomputes them from the
//!   entries. Wallet-side accounts can never go below zero; counter-accounts can.
//! - **A payment** locks its credential, then the wallet, runs `plan_debit`, posts grant and actual entries
//!   against `clearing`, writes the payment row, the idempotency record and the outbox
//!   events (`payment.completed`, `wallet.balance_changed`) in one transaction.
//! - **A refund or void** locks the payment, then the wallet, runs `plan_refund` against
//!   what earlier refunds returned, and posts the three kinds of return (actual, grant,
//!   forfeit).
pub mod classes;
pub mod liability;
pub mod money;
pub mod plan;
pub mod policy;
pub mod posting;
pub mod reports;
pub mod snapshots;

pub use classes::ValueClass;

pub use plan::{DebitPlan, GrantState, GrantView, RefundPlan, Shortfall, plan_debit, plan_refund};
pub use posting::{Account, GrantHolder, Posting, PostingKind};
