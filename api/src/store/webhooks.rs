//! Webhook subscriptions, deliveries and attempts.
use chrono::{DateTime, Utc};
use entities::{
    webhook_attempt, webhook_delivery, webhook_delivery::DeliveryState, webhook_subscription,
    webhook_subscription::SubscriptionState,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait},
};
use uuid::Uuid;

use crate::store::for_update;

pub async fn insert_subscription<C: ConnectionTrait>(
    c: &C,
    s: webhook_subscription::Model,
) -> Result<(), DbErr> {
    webhook_subscription::Entity::insert(s.into_active_model())
        .exec(c)
        .await
        .map(|_| ())
}

/// The integration's subscriptions (only `merchant`'s when given) in the order they were
/// registered, after the cursor.
pub async fn subscriptions_page<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Option<Uuid>,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<webhook_subscription::Model>, DbErr> {
    let mut q = webhook_subscription::Entity::find()
        .filter(webhook_subscription::Column::IntegrationId.eq(integration_id));
    if let Some(m) = merchant {
        q = q.filter(webhook_subscription::Column::MerchantId.eq(m));
    }
    if let Some(a) = after {
        q = q.filter(webhook_subscription::Column::Id.gt(a));
    }
    q.order_by_asc(webhook_subscription::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

pub async fn find_subscription<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<webhook_subscription::Model>, DbErr> {
    webhook_subscription::Entity::find_by_id(id).one(c).await
}

pub async fn lock_subscription<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<webhook_subscription::Model>, DbErr> {
    for_update(c, webhook_subscription::Entity::find_by_id(id))
        .one(c)
        .await
}

pub async fn update_subscription<C: ConnectionTrait>(
    c: &C,
    s: webhook_subscription::Model,
) -> Result<webhook_subscription::Model, DbErr> {
    s.into_active_model().reset_all().update(c).await
}

/// A failed attempt: one more in the streak (which starts now if none is running).
/// Returns the subscription after it.
pub async fn note_failure<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<Option<webhook_subscription::Model>, DbErr> {
    webhook_subscription::Entity::update_many()
        .col_expr(
            webhook_subscription::Column::FailureStreak,
            Expr::col(webhook_subscription::Column::FailureStreak).add(1),
        )
        .col_expr(
            webhook_subscription::Column::FailingSince,
            Expr::col(webhook_subscription::Column::FailingSince).if_null(now),
        )
        .filter(webhook_subscription::Column::Id.eq(id))
        .exec(c)
        .await?;
    find_subscription(c, id).await
}

pub async fn note_success<C: ConnectionTrait>(c: &C, id: Uuid) -> Result<(), DbErr> {
    webhook_subscription::Entity::update_many()
        .col_expr(webhook_subscription::Column::FailureStreak, Expr::value(0))
        .col_expr(
            webhook_subscription::Column::FailingSince,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .filter(webhook_subscription::Column::Id.eq(id))
        .filter(webhook_subscription::Column::FailureStreak.gt(0))
        .exec(c)
        .await
        .map(|_| ())
}

/// Auto-disable: only an ACTIVE subscription moves (a manual disable keeps its reason).
pub async fn disable_failing<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let r = webhook_subscription::Entity::update_many()
        .col_expr(
            webhook_subscription::Column::State,
            Expr::value(SubscriptionState::Disabled.as_str()),
        )
        .col_expr(
            webhook_subscription::Column::DisabledReason,
            Expr::value("failing"),
        )
        .col_expr(webhook_subscription::Column::DisabledAt, Expr::value(now))
        .col_expr(webhook_subscription::Column::UpdatedAt, Expr::value(now))
        .filter(webhook_subscription::Column::Id.eq(id))
        .filter(webhook_subscription::Column::State.eq("ACTIVE"))
        .exec(c)
        .await?;
    Ok(r.rows_affected == 1)
}

/// A delivery and its subscription, in one query.
pub async fn find_delivery_with_subscription<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<(webhook_delivery::Model, Option<webhook_subscription::Model>)>, DbErr> {
    webhook_delivery::Entity::find_by_id(id)
        .find_also_related(webhook_subscription::Entity)
        .one(c)
        .await
}

/// Records successful attempts of PENDING deliveries of series `series` and marks each
/// DELIVERED, atomically. Returns the deliveries it recorded; one left out is no longer
/// that (superseded or settled meanwhile), and the caller records it under its lock.
///
/// One statement on PostgreSQL however many there are (deliveries are the busiest writes
/// of the worker); a short transaction on SQLite, which cannot update inside a WITH.
pub async fn record_successes(
    db: &crate::store::Db,
    series: i32,
    attempts: &[webhook_attempt::Model],
) -> Result<Vec<Uuid>, DbErr> {
    use sea_orm::{DbBackend, Statement};
    if attempts.is_empty() {
        return Ok(vec![]);
    }
    if db.get_database_backend() == DbBackend::Postgres {
        let sql = r#"
WITH v AS (
    SELECT * FROM jsonb_to_recordset($2::jsonb)
        AS v(delivery_id uuid, id uuid, started_at timestamptz, status_code int, latency_ms bigint)),
d AS (
    UPDATE webhook_deliveries w
       SET state = 'DELIVERED', attempts = w.attempts + 1, delivered_at = v.started_at,
           last_status_code = v.status_code, last_error = NULL, next_attempt_at = NULL,
           updated_at = v.started_at
      FROM v
     WHERE w.id = v.delivery_id AND w.replays = $1 AND w.state = 'PENDING'
 RETURNING w.id AS delivery_id, w.subscription_id, w.attempts, v.id, v.started_at,
           v.status_code, v.latency_ms)
INSERT INTO webhook_attempts
    (id, delivery_id, subscription_id, attempt, started_at, status_code, latency_ms,
     error, succeeded, next_retry_at)
SELECT id, delivery_id, subscription_id, attempts, started_at, status_code, latency_ms,
       NULL, TRUE, NULL FROM d
RETURNING delivery_id"#;
        let rows: Vec<serde_json::Value> = attempts
            .iter()
            .map(|a| {
                serde_json::json!({
                    "delivery_id": a.delivery_id,
                    "id": a.id,
                    "started_at": a.started_at,
                    "status_code": a.status_code,
                    "latency_ms": a.latency_ms,
                })
            })
            .collect();
        let done = db
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                [series.into(), serde_json::Value::Array(rows).into()],
            ))
            .await?;
        return done
            .iter()
            .map(|r| r.try_get::<Uuid>("", "delivery_id"))
            .collect();
    }
    let txn = crate::store::begin(db).await?;
    let mut recorded = Vec::with_capacity(attempts.len());
    for a in attempts {
        let updated = webhook_delivery::Entity::update_many()
            .col_expr(
                webhook_delivery::Column::State,
                Expr::value(DeliveryState::Delivered.as_str()),
            )
            .col_expr(
                webhook_delivery::Column::Attempts,
                Expr::col(webhook_delivery::Column::Attempts).add(1),
            )
            .col_expr(
                webhook_delivery::Column::DeliveredAt,
                Expr::value(a.started_at),
            )
            .col_expr(
                webhook_delivery::Column::LastStatusCode,
                Expr::value(a.status_code),
            )
            .col_expr(
                webhook_delivery::Column::LastError,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                webhook_delivery::Column::NextAttemptAt,
                Expr::value(Option::<chrono::DateTime<chrono::Utc>>::None),
            )
            .col_expr(
                webhook_delivery::Column::UpdatedAt,
                Expr::value(a.started_at),
            )
            .filter(webhook_delivery::Column::Id.eq(a.delivery_id))
            .filter(webhook_delivery::Column::Replays.eq(series))
            .filter(webhook_delivery::Column::State.eq("PENDING"))
            .exec_with_returning(&txn)
            .await?;
        if let Some(d) = updated.into_iter().next() {
            insert_attempt(
                &txn,
                webhook_attempt::Model {
                    attempt: d.attempts,
                    subscription_id: d.subscription_id,
                    ..a.clone()
                },
            )
            .await?;
            recorded.push(d.id);
        }
    }
    if recorded.is_empty() {
        // At once, not on drop: SQLite's write lock is held until the rollback runs.
        txn.rollback().await?;
    } else {
        txn.commit().await?;
    }
    Ok(recorded)
}

/// The deliveries with these ids (any order).
pub async fn deliveries_by_ids<C: ConnectionTrait>(
    c: &C,
    ids: &[Uuid],
) -> Result<Vec<webhook_delivery::Model>, DbErr> {
    webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::Id.is_in(ids.iter().copied()))
        .all(c)
        .await
}

/// For each of `resource_keys`, the lowest sequence number of a PENDING delivery to the
/// subscription other than `except`: an event of the resource above it must wait.
pub async fn earliest_pending_outside<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    resource_keys: &[&str],
    except: &[Uuid],
) -> Result<Vec<(String, i64)>, DbErr> {
    if resource_keys.is_empty() {
        return Ok(vec![]);
    }
    webhook_delivery::Entity::find()
        .select_only()
        .column(webhook_delivery::Column::ResourceKey)
        .column_as(webhook_delivery::Column::SequenceNumber.min(), "earliest")
        .filter(webhook_delivery::Column::SubscriptionId.eq(subscription))
        .filter(webhook_delivery::Column::ResourceKey.is_in(resource_keys.iter().copied()))
        .filter(webhook_delivery::Column::State.eq("PENDING"))
        .filter(webhook_delivery::Column::Id.is_not_in(except.iter().copied()))
        .group_by(webhook_delivery::Column::ResourceKey)
        .into_tuple()
        .all(c)
        .await
}

pub async fn lock_delivery<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<webhook_delivery::Model>, DbErr> {
    for_update(c, webhook_delivery::Entity::find_by_id(id))
        .one(c)
        .await
}

pub async fn update_delivery<C: ConnectionTrait>(
    c: &C,
    d: webhook_delivery::Model,
) -> Result<webhook_delivery::Model, DbErr> {
    d.into_active_model().reset_all().update(c).await
}

/// Whether an earlier event of the same resource to the same subscription is still
/// PENDING (so this one must wait to keep per-resource order).
pub async fn earlier_pending<C: ConnectionTrait>(
    c: &C,
    d: &webhook_delivery::Model,
) -> Result<bool, DbErr> {
    Ok(webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::SubscriptionId.eq(d.subscription_id))
        .filter(webhook_delivery::Column::ResourceKey.eq(d.resource_key.as_str()))
        .filter(webhook_delivery::Column::SequenceNumber.lt(d.sequence_number))
        .filter(webhook_delivery::Column::State.eq("PENDING"))
        .count(c)
        .await?
        > 0)
}

/// For each `(resource_key, sequence_number)` of `settled`, deliveries of one
/// subscription just settled, the id of the PENDING delivery of that resource that comes
/// next after it: the one whose turn it is now. One statement however many there are: a
/// batch settles up to fifty, and asking for each in turn was a round trip per delivery.
pub async fn next_pending_after_each<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    settled: &[(&str, i64)],
) -> Result<Vec<Uuid>, DbErr> {
    let Some(lowest) = settled.iter().map(|&(_, seq)| seq).min() else {
        return Ok(vec![]);
    };
    let pending: Vec<(Uuid, String, i64)> = webhook_delivery::Entity::find()
        .select_only()
        .column(webhook_delivery::Column::Id)
        .column(webhook_delivery::Column::ResourceKey)
        .column(webhook_delivery::Column::SequenceNumber)
        .filter(webhook_delivery::Column::SubscriptionId.eq(subscription))
        .filter(webhook_delivery::Column::ResourceKey.is_in(settled.iter().map(|&(key, _)| key)))
        .filter(webhook_delivery::Column::SequenceNumber.gt(lowest))
        .filter(webhook_delivery::Column::State.eq("PENDING"))
        .order_by_asc(webhook_delivery::Column::SequenceNumber)
        .into_tuple()
        .all(c)
        .await?;
    Ok(next_after(settled, &pending))
}

/// For each of `settled`, the first of `pending` (in sequence order) of its resource with a
/// higher sequence number.
fn next_after(settled: &[(&str, i64)], pending: &[(Uuid, String, i64)]) -> Vec<Uuid> {
    settled
        .iter()
        .filter_map(|&(key, seq)| {
            pending
                .iter()
                .find(|(_, k, s)| k == key && *s > seq)
                .map(|(id, _, _)| *id)
        })
        .collect()
}

pub async fn insert_attempt<C: ConnectionTrait>(
    c: &C,
    a: webhook_attempt::Model,
) -> Result<(), DbErr> {
    webhook_attempt::Entity::insert(a.into_active_model())
        .exec(c)
        .await
        .map(|_| ())
}

pub async fn count_in_state<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    state: DeliveryState,
) -> Result<u64, DbErr> {
    webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::SubscriptionId.eq(subscription))
        .filter(webhook_delivery::Column::State.eq(state.as_str()))
        .count(c)
        .await
}

/// Puts a delivery back to PENDING as a new series of attempts (replays + 1).
pub async fn requeue<C: ConnectionTrait>(
    c: &C,
    mut d: webhook_delivery::Model,
    now: DateTime<Utc>,
) -> Result<webhook_delivery::Model, DbErr> {
    d.state = DeliveryState::Pending;
    d.replays += 1;
    d.next_attempt_at = Some(now);
    d.updated_at = now;
    update_delivery(c, d).await
}

/// Requeues every delivery of the subscription in `state` (created at or after `since`),
/// oldest first.
pub async fn requeue_in_state<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    state: DeliveryState,
    since: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<Vec<webhook_delivery::Model>, DbErr> {
    let mut q = webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::SubscriptionId.eq(subscription))
        .filter(webhook_delivery::Column::State.eq(state.as_str()));
    if let Some(s) = since {
        q = q.filter(webhook_delivery::Column::CreatedAt.gte(s));
    }
    let rows = q
        .order_by_asc(webhook_delivery::Column::Id)
        .limit(10_000)
        .all(c)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for d in rows {
        out.push(requeue(c, d, now).await?);
    }
    Ok(out)
}

/// Newest first, after the cursor.
pub async fn deliveries_page<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    event_type: Option<&str>,
    state: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<webhook_delivery::Model>, DbErr> {
    deliveries_select(subscription, event_type, state, after, limit)
        .all(c)
        .await
}

/// `deliveries_page`'s query, served in order by `ix_webhook_deliveries_subscription`.
pub fn deliveries_select(
    subscription: Uuid,
    event_type: Option<&str>,
    state: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
) -> sea_orm::Select<webhook_delivery::Entity> {
    let mut q = webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::SubscriptionId.eq(subscription));
    if let Some(t) = event_type {
        q = q.filter(webhook_delivery::Column::EventType.eq(t));
    }
    if let Some(s) = state {
        q = q.filter(webhook_delivery::Column::State.eq(s));
    }
    if let Some(a) = after {
        q = q.filter(webhook_delivery::Column::Id.lt(a));
    }
    q.order_by_desc(webhook_delivery::Column::Id).limit(limit)
}

pub async fn attempts_of<C: ConnectionTrait>(
    c: &C,
    deliveries: &[Uuid],
) -> Result<Vec<webhook_attempt::Model>, DbErr> {
    if deliveries.is_empty() {
        return Ok(Vec::new());
    }
    webhook_attempt::Entity::find()
        .filter(webhook_attempt::Column::DeliveryId.is_in(deliveries.iter().copied()))
        .order_by_asc(webhook_attempt::Column::StartedAt)
        .all(c)
        .await
}

/// PENDING deliveries untouched since `cutoff` and not due after it.
pub async fn stalled<C: ConnectionTrait>(
    c: &C,
    cutoff: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<webhook_delivery::Model>, DbErr> {
    use sea_orm::Condition;
    webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::State.eq("PENDING"))
        .filter(
            Condition::any()
                .add(webhook_delivery::Column::NextAttemptAt.is_null())
                .add(webhook_delivery::Column::NextAttemptAt.lte(cutoff)),
        )
        .filter(webhook_delivery::Column::UpdatedAt.lte(cutoff))
        .limit(limit)
        .all(c)
        .await
}

/// Subscriptions for the operations console, newest first, before the cursor: of one
/// integration, in one state.
pub async fn subscriptions_for_ops<C: ConnectionTrait>(
    c: &C,
    integration_id: Option<Uuid>,
    state: Option<&str>,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<webhook_subscription::Model>, DbErr> {
    let mut q = webhook_subscription::Entity::find();
    if let Some(i) = integration_id {
        q = q.filter(webhook_subscription::Column::IntegrationId.eq(i));
    }
    if let Some(s) = state {
        q = q.filter(webhook_subscription::Column::State.eq(s));
    }
    if let Some(b) = before {
        q = q.filter(webhook_subscription::Column::Id.lt(b));
    }
    q.order_by_desc(webhook_subscription::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

/// The endpoint's attempts since `since`, newest first, at most `limit` (the index
/// `(subscription_id, started_at)` serves it).
pub async fn recent_attempts<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    since: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<webhook_attempt::Model>, DbErr> {
    webhook_attempt::Entity::find()
        .filter(webhook_attempt::Column::SubscriptionId.eq(subscription))
        .filter(webhook_attempt::Column::StartedAt.gte(since))
        .order_by_desc(webhook_attempt::Column::StartedAt)
        .limit(limit)
        .all(c)
        .await
}

/// The endpoint's last failed attempts, newest first.
pub async fn last_failures<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    limit: u64,
) -> Result<Vec<webhook_attempt::Model>, DbErr> {
    webhook_attempt::Entity::find()
        .filter(webhook_attempt::Column::SubscriptionId.eq(subscription))
        .filter(webhook_attempt::Column::Succeeded.eq(false))
        .order_by_desc(webhook_attempt::Column::StartedAt)
        .limit(limit)
        .all(c)
        .await
}

/// Deliveries of the subscription in `state` created at or after `since`.
pub async fn count_in_state_since<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    state: DeliveryState,
    since: DateTime<Utc>,
) -> Result<u64, DbErr> {
    webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::SubscriptionId.eq(subscription))
        .filter(webhook_delivery::Column::State.eq(state.as_str()))
        .filter(webhook_delivery::Column::CreatedAt.gte(since))
        .count(c)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_of_a_settled_delivery_is_the_lowest_later_pending_one_of_its_resource() {
        let id = |n: u128| Uuid::from_u128(n);
        let pending = [
            (id(1), "payment:a".to_string(), 2),
            (id(2), "payment:b".to_string(), 3),
            (id(3), "payment:a".to_string(), 4),
            (id(4), "payment:b".to_string(), 7),
        ];
        // a settled at 1: its 2 is next. b settled at 3 (the pending 3 is itself, not
        // after it): 7. c has nothing pending.
        let next = next_after(
            &[("payment:a", 1), ("payment:b", 3), ("payment:c", 1)],
            &pending,
        );
        assert_eq!(next, vec![id(1), id(4)]);
        assert!(next_after(&[("payment:a", 4)], &pending).is_empty());
    }
}
