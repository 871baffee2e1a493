//! Persistence: the only place that builds queries. Every finder of tenant-owned data takes
//! the tenant (integration or merchant) so no query can forget it.
pub mod credentials;
pub mod customers;
pub mod db;
pub mod disputes;
pub mod idempotency;
pub mod incentives;
pub mod ledger;
pub mod outbox;
pub mod payments;
pub mod queues;
pub mod sandbox_messages;
pub mod tenancy;
pub mod topups;
pub mod webhooks;

pub use db::errors::{is_transient, is_unique_violation};
pub use db::pooler::Db;
pub use db::{
    WriteTxn, begin, close, connect, connect_direct, connect_replica, in_transaction, ping,
};

/// `q` locking its rows until the transaction ends. On PostgreSQL that is `FOR UPDATE`;
/// SQLite has no row locks, and its IMMEDIATE write transaction already excludes every
/// other writer.
pub fn for_update<E: sea_orm::EntityTrait, C: sea_orm::ConnectionTrait>(
    c: &C,
    q: sea_orm::Select<E>,
) -> sea_orm::Select<E> {
    use sea_orm::QuerySelect;
    if c.get_database_backend() == sea_orm::DbBackend::Postgres {
        q.lock(sea_orm::sea_query::LockType::Update)
    } else {
        q
    }
}

/// The smallest UUIDv7 of the millisecond `t` (what partition bounds are made of too).
pub use migration::partitions::uuid_v7_floor;

/// `LOWER(col) LIKE '%text%'` with `%`, `_` and `\\` in `text` taken literally: a
/// case-insensitive "contains" that both backends run the same way (and PostgreSQL can
/// serve from a trigram index on `lower(col)`).
pub(crate) fn contains_any_case<C: sea_orm::sea_query::IntoColumnRef>(
    col: C,
    text: &str,
) -> sea_orm::sea_query::SimpleExpr {
    use sea_orm::sea_query::{Expr, ExprTrait, Func, LikeExpr};
    let escaped = text
        .to_lowercase()
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    Expr::expr(Func::lower(Expr::col(col))).like(LikeExpr::new(format!("%{escaped}%")).escape('\\'))
}
