use chrono::{DateTime, Utc};
use entities::{outbox, resource_sequence};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
    sea_query::{Expr, ExprTrait, LockBehavior, LockType, OnConflict},
};
use uuid::Uuid;

use crate::domain::events::NewOutbox;

/// Next `sequence_number` of a resource. The upsert holds the sequence row until the
/// transaction ends, so two writers to one resource get consecutive numbers in commit order.
pub async fn next_sequence<C: ConnectionTrait>(
    c: &C,
    resource_type: &str,
    resource_id: &str,
) -> Result<i64, DbErr> {
    let row = resource_sequence::Entity::insert(resource_sequence::ActiveModel {
        resource_type: Set(resource_type.to_string()),
        resource_id: Set(resource_id.to_string()),
        last_value: Set(1),
    })
    .on_conflict(
        OnConflict::columns([
            resource_sequence::Column::ResourceType,
            resource_sequence::Column::ResourceId,
        ])
        .value(
            resource_sequence::Column::LastValue,
            Expr::col((
                resource_sequence::Entity,
                resource_sequence::Column::LastValue,
            ))
            .add(1),
        )
        .to_owned(),
    )
    .exec_with_returning(c)
    .await?;
    Ok(row.last_value)
}

/// Next `sequence_number` of each resource, in one statement. The resources must be
/// distinct (one upsert cannot touch a row twice).
async fn next_sequences<C: ConnectionTrait>(
    c: &C,
    resources: &[(String, String)],
) -> Result<Vec<i64>, DbErr> {
    let rows = resources
        .iter()
        .map(|(t, id)| resource_sequence::ActiveModel {
            resource_type: Set(t.clone()),
            resource_id: Set(id.clone()),
            last_value: Set(1),
        });
    let updated = resource_sequence::Entity::insert_many(rows)
        .on_conflict(
            OnConflict::columns([
                resource_sequence::Column::ResourceType,
                resource_sequence::Column::ResourceId,
            ])
            .value(
                resource_sequence::Column::LastValue,
                Expr::col((
                    resource_sequence::Entity,
                    resource_sequence::Column::LastValue,
                ))
                .add(1),
            )
            .to_owned(),
        )
        .exec_with_returning(c)
        .await?;
    resources
        .iter()
        .map(|(t, id)| {
            updated
                .iter()
                .find(|m| &m.resource_type == t && &m.resource_id == id)
                .map(|m| m.last_value)
                .ok_or_else(|| DbErr::Custom(format!("no sequence returned for {t} {id}")))
        })
        .collect()
}

/// Appends a row; returns its `event_id`.
pub async fn append<C: ConnectionTrait>(c: &C, item: NewOutbox) -> Result<Uuid, DbErr> {
    Ok(append_all(c, vec![item]).await?.remove(0))
}

/// Appends rows in one insert, in order; returns their `event_id`s.
pub async fn append_all<C: ConnectionTrait>(
    c: &C,
    items: Vec<NewOutbox>,
) -> Result<Vec<Uuid>, DbErr> {
    let now = Utc::now();
    let resources: Vec<(String, String)> = items
        .iter()
        .map(|i| (i.resource_type.clone(), i.resource_id.clone()))
        .collect();
    let distinct = resources
        .iter()
        .enumerate()
        .all(|(n, r)| !resources[..n].contains(r));
    let seqs = if distinct {
        next_sequences(c, &resources).await?
    } else {
        // Several events of one resource: numbered one after another.
        let mut v = Vec::with_capacity(resources.len());
        for (t, id) in &resources {
            v.push(next_sequence(c, t, id).await?);
        }
        v
    };
    let mut ids = Vec::with_capacity(items.len());
    let mut rows = Vec::with_capacity(items.len());
    for (item, seq) in items.into_iter().zip(seqs) {
        let event_id = Uuid::now_v7();
        ids.push(event_id);
        rows.push(outbox::ActiveModel {
            event_id: Set(event_id),
            kind: Set(item.kind.as_str().to_string()),
            topic: Set(item.topic),
            merchant_id: Set(item.merchant_id),
            resource_type: Set(item.resource_type),
            resource_id: Set(item.resource_id),
            sequence_number: Set(seq),
            payload: Set(item.payload),
            occurred_at: Set(item.occurred_at),
            created_at: Set(now),
            relayed_at: Set(None),
            ..Default::default()
        });
    }
    outbox::Entity::insert_many(rows)
        .exec_without_returning(c)
        .await?;
    Ok(ids)
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

/// The events a resource caused, in sequence.
pub async fn events_of<C: ConnectionTrait>(
    c: &C,
    resource_type: &str,
    resource_id: &str,
) -> Result<Vec<outbox::Model>, DbErr> {
    outbox::Entity::find()
        .filter(outbox::Column::ResourceType.eq(resource_type))
        .filter(outbox::Column::ResourceId.eq(resource_id))
        .filter(outbox::Column::Kind.eq("event"))
        .order_by_asc(outbox::Column::SequenceNumber)
        .all(c)
        .await
}
