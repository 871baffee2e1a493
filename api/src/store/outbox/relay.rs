//! The outbox relay's one transaction: claim committed outbox rows, write what they fan out
//! to (webhook deliveries), insert the queue rows they ask for (apalis' tables live in the
//! same database), mark them relayed, commit. Raw SQL because apalis' insert needs the
//! sqlx transaction itself.
//!
//! Relays run one at a time (a transaction-scoped advisory lock on PostgreSQL; SQLite has
//! one writer): outbox ids of one resource grow with its sequence numbers, so deliveries
//! of a resource are always written in sequence order, which per-resource ordering needs.
use apalis_core::task::Task;
use chrono::{DateTime, Utc};
use entities::{webhook_delivery::DeliveryState, webhook_subscription::SubscriptionState};
use sea_orm::{
    ConnectionTrait, DbBackend,
    sqlx::{self, Row},
};

use crate::store::Db;
use serde_json::Value;
use uuid::Uuid;

#[derive(Clone, Debug)]
pub struct PendingRow {
    pub id: i64,
    pub event_id: Uuid,
    pub kind: String,
    pub topic: String,
    pub merchant_id: Option<Uuid>,
    pub resource_type: String,
    pub resource_id: String,
    pub sequence_number: i64,
    pub payload: Value,
    pub occurred_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    /// The request that wrote the row and the trace it continues.
    pub request_id: Option<String>,
    pub traceparent: Option<String>,
}

/// A webhook subscription of an integration linked to `merchant_id`.
#[derive(Clone, Debug)]
pub struct SubscriptionRow {
    pub id: Uuid,
    pub integration_id: Uuid,
    pub bound_merchant: Option<Uuid>,
    pub event_types: Option<Value>,
    pub state: SubscriptionState,
    /// The linked merchant this row was found for.
    pub merchant_id: Uuid,
}

#[derive(Clone, Debug)]
pub struct NewDelivery {
    pub id: Uuid,
    pub subscription_id: Uuid,
    pub integration_id: Uuid,
    pub merchant_id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub resource_key: String,
    pub sequence_number: i64,
    pub body: String,
    pub state: DeliveryState,
    pub request_id: Option<String>,
    pub traceparent: Option<String>,
}

/// What a batch turns into.
#[derive(Default)]
pub struct Plan {
    pub deliveries: Vec<NewDelivery>,
    pub tasks: Vec<(String, Task<Vec<u8>>)>,
}

const COLUMNS: &str = "id, event_id, kind, topic, merchant_id, resource_type, resource_id, \
     sequence_number, payload, occurred_at, created_at, request_id, traceparent";

/// The relay's poll: the oldest rows not yet relayed, up to the bound limit. It must find
/// them through `ix_outbox_unrelayed`, which holds only those rows (migration 000008): the
/// outbox keeps every relayed row as the event history.
pub fn pending_select(backend: DbBackend) -> String {
    match backend {
        DbBackend::Postgres => format!(
            "SELECT {COLUMNS} FROM outbox WHERE relayed_at IS NULL ORDER BY id LIMIT $1 \
             FOR UPDATE SKIP LOCKED"
        ),
        _ => format!("SELECT {COLUMNS} FROM outbox WHERE relayed_at IS NULL ORDER BY id LIMIT ?"),
    }
}

const DELIVERY_COLUMNS: &str = "id, subscription_id, integration_id, merchant_id, event_id, \
     event_type, resource_key, sequence_number, body, state, attempts, replays, created_at, \
     updated_at, request_id, traceparent";
const DELIVERY_ARITY: usize = 16;

/// `rows` groups of `arity` SQLite placeholders: `(?,?),(?,?)`.
fn placeholders(rows: usize, arity: usize) -> String {
    let group = format!("({})", vec!["?"; arity].join(","));
    vec![group; rows].join(",")
}

fn subscription_state(s: String) -> Result<SubscriptionState, sqlx::Error> {
    SubscriptionState::parse(&s).ok_or_else(|| {
        sqlx::Error::Decode(format!("unknown webhook subscription state {s:?}").into())
    })
}

/// Relays up to `limit` rows; `plan` says what the batch fans out to. Returns the rows.
pub async fn relay_batch<F>(db: &Db, limit: i64, plan: F) -> anyhow::Result<Vec<PendingRow>>
where
    F: Fn(&[PendingRow], &[SubscriptionRow], DateTime<Utc>) -> Plan,
{
    match db.get_database_backend() {
        DbBackend::Postgres => relay_pg(db, limit, plan).await,
        _ => relay_sqlite(db, limit, plan).await,
    }
}

fn merchants(rows: &[PendingRow]) -> Vec<Uuid> {
    let mut m: Vec<Uuid> = rows
        .iter()
        .filter(|r| r.kind == "event")
        .filter_map(|r| r.merchant_id)
        .collect();
    m.sort();
    m.dedup();
    m
}

async fn relay_pg<F>(db: &Db, limit: i64, plan: F) -> anyhow::Result<Vec<PendingRow>>
where
    F: Fn(&[PendingRow], &[SubscriptionRow], DateTime<Utc>) -> Plan,
{
    let mut tx = db.begin_pg().await?;
    // One relay at a time (see the module comment); the key is this module's own.
    sqlx::query("SELECT pg_advisory_xact_lock(7352001)")
        .execute(&mut *tx)
        .await?;
    // The outbox's statements are planned afresh on every run (unnamed, not cached): a plan
    // a connection cached while the outbox was small stays until the table is analyzed, and
    // the outbox only grows, as it keeps every relayed row.
    let rows = sqlx::query(sqlx::AssertSqlSafe(pending_select(DbBackend::Postgres)))
        .bind(limit)
        .persistent(false)
        .fetch_all(&mut *tx)
        .await?;
    // After the read (and the wait for the relay's turn): every row it took was committed,
    // so its occurred_at is not after `now`, the envelope's emitted_at.
    let now = Utc::now();
    let rows: Vec<PendingRow> = rows
        .iter()
        .map(|r| {
            Ok(PendingRow {
                id: r.try_get("id")?,
                event_id: r.try_get("event_id")?,
                kind: r.try_get("kind")?,
                topic: r.try_get("topic")?,
                merchant_id: r.try_get("merchant_id")?,
                resource_type: r.try_get("resource_type")?,
                resource_id: r.try_get("resource_id")?,
                sequence_number: r.try_get("sequence_number")?,
                payload: r.try_get("payload")?,
                occurred_at: r.try_get("occurred_at")?,
                created_at: r.try_get("created_at")?,
                request_id: r.try_get("request_id")?,
                traceparent: r.try_get("traceparent")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    if rows.is_empty() {
        return Ok(rows);
    }
    let merchants = merchants(&rows);
    let subs: Vec<SubscriptionRow> = if merchants.is_empty() {
        Vec::new()
    } else {
        sqlx::query(
            "SELECT s.id, s.integration_id, s.merchant_id, s.event_types, s.state, ie.enterprise_id \
             FROM webhook_subscriptions s JOIN integration_enterprises ie \
             ON ie.integration_id = s.integration_id WHERE ie.enterprise_id = ANY($1) \
             FOR SHARE OF s",
        )
        .bind(&merchants)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(SubscriptionRow {
                id: r.try_get("id")?,
                integration_id: r.try_get("integration_id")?,
                bound_merchant: r.try_get("merchant_id")?,
                event_types: r.try_get("event_types")?,
                state: subscription_state(r.try_get("state")?)?,
                merchant_id: r.try_get("enterprise_id")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?
    };
    let plan = plan(&rows, &subs, now);
    if !plan.deliveries.is_empty() {
        insert_deliveries_pg(&mut tx, plan.deliveries, now).await?;
    }
    for (queue, tasks) in group(plan.tasks) {
        apalis_postgres::queries::push_tasks(&mut *tx, &queue, tasks).await?;
    }
    // By the partition key: each row is found in its own month's partition.
    let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.event_id).collect();
    sqlx::query("UPDATE outbox SET relayed_at = $1 WHERE event_id = ANY($2)")
        .bind(now)
        .bind(&ids)
        .persistent(false)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}

/// The new deliveries in one statement whose text does not depend on their number: each
/// column is bound as an array and unnested. PostgreSQL prepares it once per connection;
/// a `VALUES` list of sixteen parameters per delivery was a statement of its own for each
/// batch size, parsed and planned afresh, with a bind call per value.
async fn insert_deliveries_pg(
    tx: &mut sqlx::PgConnection,
    deliveries: Vec<NewDelivery>,
    now: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    let n = deliveries.len();
    let mut uuids: [Vec<Uuid>; 5] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut texts: [Vec<String>; 3] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut states = Vec::with_capacity(n);
    let mut origins: [Vec<Option<String>>; 2] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut sequences = Vec::with_capacity(n);
    for d in deliveries {
        for (column, v) in uuids.iter_mut().zip([
            d.id,
            d.subscription_id,
            d.integration_id,
            d.merchant_id,
            d.event_id,
        ]) {
            column.push(v);
        }
        for (column, v) in texts.iter_mut().zip([d.event_type, d.resource_key, d.body]) {
            column.push(v);
        }
        states.push(d.state.as_str());
        for (column, v) in origins.iter_mut().zip([d.request_id, d.traceparent]) {
            column.push(v);
        }
        sequences.push(d.sequence_number);
    }
    let [ids, subscriptions, integrations, merchants, events] = uuids;
    let [event_types, resource_keys, bodies] = texts;
    let [request_ids, traceparents] = origins;
    sqlx::query(
        "INSERT INTO webhook_deliveries (id, subscription_id, integration_id, merchant_id, \
         event_id, event_type, resource_key, sequence_number, body, state, attempts, replays, \
         created_at, updated_at, request_id, traceparent) \
         SELECT id, subscription_id, integration_id, merchant_id, event_id, event_type, \
         resource_key, sequence_number, body, state, 0, 0, $13::timestamptz, $13::timestamptz, \
         request_id, traceparent \
         FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::uuid[], $6::text[], \
         $7::text[], $8::int8[], $9::text[], $10::text[], $11::text[], $12::text[]) \
         AS d(id, subscription_id, integration_id, merchant_id, event_id, event_type, \
         resource_key, sequence_number, body, state, request_id, traceparent) \
         ON CONFLICT (subscription_id, event_id) DO NOTHING",
    )
    .bind(ids)
    .bind(subscriptions)
    .bind(integrations)
    .bind(merchants)
    .bind(events)
    .bind(event_types)
    .bind(resource_keys)
    .bind(sequences)
    .bind(bodies)
    .bind(states)
    .bind(request_ids)
    .bind(traceparents)
    .bind(now)
    .execute(tx)
    .await?;
    Ok(())
}

async fn relay_sqlite<F>(db: &Db, limit: i64, plan: F) -> anyhow::Result<Vec<PendingRow>>
where
    F: Fn(&[PendingRow], &[SubscriptionRow], DateTime<Utc>) -> Plan,
{
    let pool = db.connection().get_sqlite_connection_pool();
    // IMMEDIATE: take the write lock up front instead of failing to upgrade later.
    let _turn = crate::store::db::write_turn(pool).await?;
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let rows = sqlx::query(sqlx::AssertSqlSafe(pending_select(DbBackend::Sqlite)))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    // After the read (and the wait for the relay's turn): every row it took was committed,
    // so its occurred_at is not after `now`, the envelope's emitted_at.
    let now = Utc::now();
    let rows: Vec<PendingRow> = rows
        .iter()
        .map(|r| {
            let payload: String = r.try_get("payload")?;
            Ok(PendingRow {
                id: r.try_get("id")?,
                event_id: r.try_get("event_id")?,
                kind: r.try_get("kind")?,
                topic: r.try_get("topic")?,
                merchant_id: r.try_get("merchant_id")?,
                resource_type: r.try_get("resource_type")?,
                resource_id: r.try_get("resource_id")?,
                sequence_number: r.try_get("sequence_number")?,
                payload: serde_json::from_str(&payload)
                    .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                occurred_at: r.try_get("occurred_at")?,
                created_at: r.try_get("created_at")?,
                request_id: r.try_get("request_id")?,
                traceparent: r.try_get("traceparent")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    if rows.is_empty() {
        // At once, not on drop: the idle relay runs every poll interval, and the write lock
        // it took must not outlive this call.
        tx.rollback().await?;
        return Ok(rows);
    }
    let merchants = merchants(&rows);
    let subs: Vec<SubscriptionRow> = if merchants.is_empty() {
        Vec::new()
    } else {
        let sql = format!(
            "SELECT s.id, s.integration_id, s.merchant_id, s.event_types, s.state, \
             ie.enterprise_id FROM webhook_subscriptions s JOIN integration_enterprises ie \
             ON ie.integration_id = s.integration_id WHERE ie.enterprise_id IN ({})",
            vec!["?"; merchants.len()].join(",")
        );
        // Only placeholders are interpolated, never values.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for m in &merchants {
            q = q.bind(*m);
        }
        q.fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                let types: Option<String> = r.try_get("event_types")?;
                Ok(SubscriptionRow {
                    id: r.try_get("id")?,
                    integration_id: r.try_get("integration_id")?,
                    bound_merchant: r.try_get("merchant_id")?,
                    event_types: types
                        .map(|t| serde_json::from_str(&t))
                        .transpose()
                        .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                    state: subscription_state(r.try_get("state")?)?,
                    merchant_id: r.try_get("enterprise_id")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?
    };
    let plan = plan(&rows, &subs, now);
    for chunk in plan.deliveries.chunks(500) {
        let sql = format!(
            "INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) VALUES {} \
             ON CONFLICT (subscription_id, event_id) DO NOTHING",
            placeholders(chunk.len(), DELIVERY_ARITY)
        );
        // Only placeholders are interpolated, never values.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for d in chunk {
            q = q
                .bind(d.id)
                .bind(d.subscription_id)
                .bind(d.integration_id)
                .bind(d.merchant_id)
                .bind(d.event_id)
                .bind(&d.event_type)
                .bind(&d.resource_key)
                .bind(d.sequence_number)
                .bind(&d.body)
                .bind(d.state.as_str())
                .bind(0i32)
                .bind(0i32)
                .bind(now)
                .bind(now)
                .bind(&d.request_id)
                .bind(&d.traceparent);
        }
        q.execute(&mut *tx).await?;
    }
    for (queue, tasks) in group(plan.tasks) {
        apalis_sqlite::queries::push_tasks(&mut *tx, &queue, &tasks).await?;
    }
    let sql = format!(
        "UPDATE outbox SET relayed_at = ? WHERE id IN ({})",
        vec!["?"; rows.len()].join(",")
    );
    // Only placeholders are interpolated, never values.
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now);
    for r in &rows {
        q = q.bind(r.id);
    }
    q.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}

fn group(tasks: Vec<(String, Task<Vec<u8>>)>) -> Vec<(String, Vec<Task<Vec<u8>>>)> {
    let mut out: Vec<(String, Vec<Task<Vec<u8>>>)> = vec![];
    for (queue, task) in tasks {
        match out.iter_mut().find(|(q, _)| *q == queue) {
            Some((_, v)) => v.push(task),
            None => out.push((queue, vec![task])),
        }
    }
    out
}
