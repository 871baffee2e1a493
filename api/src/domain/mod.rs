//! Domain logic: plain Rust that knows nothing about HTTP. Services open the transaction and
//! hand it to `store`; the change, its idempotency record and its outbox rows share it.
//! A folder per subdomain (platform, credentials, customers, payments, top-ups,
//! incentives, transactions, webhooks, operators, sandbox), the outbox every side effect
//! leaves through (`outbox`), and the leaves all share: `ledger`, `money`, `validate`.
pub mod credentials;
pub mod customers;
pub mod incentives;
pub mod ledger;
pub mod operators;
pub mod outbox;
pub mod payments;
pub mod platform;
pub mod risk;
pub mod sandbox;
pub mod topups;
pub mod transactions;
pub mod validate;
pub mod webhooks;

/// A page of a cursor-paginated list from the `limit + 1` rows its query read: the first
/// `limit`, and whether there were more.
pub fn page_of<T>(mut rows: Vec<T>, limit: u64) -> (Vec<T>, bool) {
    let more = rows.len() as u64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    (rows, more)
}
