pub(in crate::store) mod event_batch;
pub mod events;
pub mod outbox_row;
pub mod relay;
use chrono::{DateTime, Utc};
use entities::outbox;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Select,
    sea_query::{Expr, LockBehavior, LockType},
};
use uuid::Uuid;

use crate::store::outbox::outbox_row::NewOutbox;
use crate::store::{db::writes::Writes, outbox::event_batch::Events};

/// Appends a row; returns its `event_id`.
pub async fn append<C: ConnectionTrait>(c: &C, item: NewOutbox) -> Result<Uuid, DbErr> {
    Ok(append_all(c, vec![item]).await?.remove(0))
}

/// Appends rows in one insert, in order; returns their `event_id`s.
pub async fn append_all<C: ConnectionTrait>(
    c: &C,
    items: Vec<NewOutbox>,
) -> Result<Vec<Uuid>, DbErr> {
    let mut w = Writes::default();
    let ids = defer_all(&mut w, items);
    w.flush(c).await?;
    Ok(ids)
}

/// Like `append_all`, written when `w` is flushed.
pub fn defer_all(w: &mut Writes, items: Vec<NewOutbox>) -> Vec<Uuid> {
    if items.is_empty() {
        return Vec::new();
    }
    let (events, ids) = Events::new(items, Utc::now());
    w.events(events);
    ids
}

/// Committed rows not yet relayed, oldest first. On PostgreSQL the rows are locked with
/// SKIP LOCKED so several relays share the backlog without taking a row twice; SQLite's
/// IMMEDIATE transaction already makes the relay the only writer.
pub async fn claim_pending<C: ConnectionTrait>(
    c: &C,
    limit: u64,
) -> Result<Vec<outbox::Model>, DbErr> {
    let mut q = outbox::Entity::find()
        .filter(outbox::Column::RelayedAt.is_null())
        .order_by_asc(outbox::Column::Id)
        .limit(limit);
    if c.get_database_backend() == DbBackend::Postgres {
        q = q.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    q.all(c).await
}

pub async fn mark_relayed<C: ConnectionTrait>(
    c: &C,
    ids: &[i64],
    at: DateTime<Utc>,
) -> Result<(), DbErr> {
    if ids.is_empty() {
        return Ok(());
    }
    outbox::Entity::update_many()
        .col_expr(outbox::Column::RelayedAt, Expr::value(at))
        .filter(outbox::Column::Id.is_in(ids.iter().copied()))
        .exec(c)
        .await?;
    Ok(())
}

/// Rows still waiting for the relay (a health and metrics figure).
pub async fn pending_count<C: ConnectionTrait>(c: &C) -> Result<u64, DbErr> {
    use sea_orm::PaginatorTrait;
    outbox::Entity::find()
        .filter(outbox::Column::RelayedAt.is_null())
        .count(c)
        .await
}

/// How long the oldest committed row the relay has not moved yet has waited, in seconds
/// (0 when none waits): the relay's lag.
pub async fn oldest_pending_age<C: ConnectionTrait>(
    c: &C,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<f64, DbErr> {
    let oldest = outbox::Entity::find()
        .filter(outbox::Column::RelayedAt.is_null())
        .order_by_asc(outbox::Column::Id)
        .one(c)
        .await?;
    Ok(oldest.map_or(0.0, |o| {
        Ord::max((now - o.created_at).num_milliseconds(), 0) as f64 / 1000.0
    }))
}

/// The events a resource caused, in sequence.
pub async fn events_of<C: ConnectionTrait>(
    c: &C,
    resource_type: &str,
    resource_id: &str,
) -> Result<Vec<outbox::Model>, DbErr> {
    events_of_select(resource_type, resource_id).all(c).await
}

/// `events_of`'s query, found through `ix_outbox_resource` (migration 000008).
pub fn events_of_select(resource_type: &str, resource_id: &str) -> Select<outbox::Entity> {
    outbox::Entity::find()
        .filter(outbox::Column::ResourceType.eq(resource_type))
        .filter(outbox::Column::ResourceId.eq(resource_id))
        .filter(outbox::Column::Kind.eq("event"))
        .order_by_asc(outbox::Column::SequenceNumber)
}
