//! The only way a side effect leaves a transaction: outbox rows written in the caller's
//! transaction, either events (`events`) or jobs asked for (`job_requests`: SMS, webhook
//! deliveries), relayed after commit.
pub mod events;
pub mod job_requests;
