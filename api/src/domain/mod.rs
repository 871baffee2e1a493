//! Domain logic: plain Rust that knows nothing about HTTP. Services open the transaction and
//! hand it to `store`; the change, its idempotency record and its outbox rows share it.
pub mod balance_check;
pub mod budgets;
pub mod caller;
pub mod cashback;
pub mod cells;
pub mod checkout;
pub mod clock;
pub mod corrections;
pub mod cors;
pub mod credential_codes;
pub mod credentials;
pub mod currencies;
pub mod customers;
pub mod dead_letters;
pub mod disputes;
pub mod enrollment;
pub mod event_feed;
pub mod events;
pub mod expiry;
pub mod grant_events;
pub mod grants;
pub mod guessing;
pub mod identity;
pub mod job_requests;
pub mod ledger;
pub mod money;
pub mod offers;
pub mod operators;
pub mod payments;
pub mod platform;
pub mod proof_window;
pub mod reload_bonus;
pub mod rewards;
pub mod settlements;
pub mod tenancy;
pub mod test_clock;
pub mod topup_reversals;
pub mod topups;
pub mod transactions;
pub mod validate;
pub mod wallets;
pub mod webhooks;

/// A page of a cursor-paginated list from the `limit + 1` rows its query read: the first
/// `limit`, and whether there were more.
pub fn page_of<T>(mut rows: Vec<T>, limit: u64) -> (Vec<T>, bool) {
    let more = rows.len() as u64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    (rows, more)
}
