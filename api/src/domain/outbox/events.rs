//! The transactional outbox as the domain writes it: every catalog event and every job is an
//! outbox row written in the same transaction as the change that caused it (the row type is
//! the store's: see `store::outbox::outbox_row`).
pub use crate::store::outbox::outbox_row::{NewOutbox, OutboxKind};
