//! Deleting what has outlived its use, one small batch at a time. Only tables that grow
//! with traffic and hold no money fact are here: the ledger, payments, refunds, top-ups,
//! wallets and the audit log are never pruned.
//!
//! Every batch is found through an index in key order (UUIDv7 ids grow with time), so a
//! pass costs what it deletes, not what the table holds.
use chrono::{DateTime, Utc};
use entities::{
    idempotency_record, otp_session, outbox, qr_nonce, sandbox_message, webhook_attempt,
    webhook_delivery,
};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbBackend, DbErr, EntityTrait, Order, QueryFilter,
    Statement,
    sea_query::{Expr, ExprTrait, Query},
};

use crate::store::{queues::job_queue::FINISHED, uuid_v7_floor};

/// What a retention pass prunes, and the `table` label of its metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Job queue rows that finished (done, killed, or failed with no attempt left).
    FinishedJobs,
    /// Outbox rows already relayed, older than the events API's window.
    OutboxEvents,
    IdempotencyRecords,
    /// Expired OTP sessions that paid nothing (a used one is part of its payment).
    OtpSessions,
    /// Expired QR nonces and short codes that paid nothing.
    QrNonces,
    /// Webhook deliveries that settled (delivered or dead).
    WebhookDeliveries,
    WebhookAttempts,
    SandboxMessages,
    /// Report runs past their `expires_at`, with their files.
    ReportRuns,
}

impl Table {
    pub const ALL: [Table; 9] = [
        Table::FinishedJobs,
        Table::OutboxEvents,
        Table::IdempotencyRecords,
        Table::OtpSessions,
        Table::QrNonces,
        Table::WebhookDeliveries,
        Table::WebhookAttempts,
        Table::SandboxMessages,
        Table::ReportRuns,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Table::FinishedJobs => "jobs",
            Table::OutboxEvents => "outbox",
            Table::IdempotencyRecords => "idempotency_records",
            Table::OtpSessions => "otp_sessions",
            Table::QrNonces => "qr_nonces",
            Table::WebhookDeliveries => "webhook_deliveries",
            Table::WebhookAttempts => "webhook_attempts",
            Table::SandboxMessages => "sandbox_messages",
            Table::ReportRuns => "report_runs",
        }
    }
}

/// Deletes up to `limit` rows of `table` that were done with more than `keep` before
/// `now` (an idempotency record: created that long ago and expired by `now`). Returns how
/// many went; fewer than `limit` means none is left.
pub async fn prune_batch<C: ConnectionTrait>(
    c: &C,
    table: Table,
    now: DateTime<Utc>,
    keep: chrono::Duration,
    limit: u64,
) -> Result<u64, DbErr> {
    let cutoff = now - keep;
    let before = uuid_v7_floor(cutoff);
    match table {
        Table::FinishedJobs => prune_finished_jobs(c, cutoff, limit).await,
        Table::OutboxEvents => prune_outbox(c, cutoff, limit).await,
        Table::IdempotencyRecords => {
            use idempotency_record::Column as Col;
            delete_first::<idempotency_record::Entity, _>(
                c,
                Col::Id,
                Condition::all()
                    .add(Col::Id.lt(before))
                    .add(Col::ExpiresAt.lte(now)),
                limit,
            )
            .await
        }
        // A credential that paid is part of its payment's record and stays.
        Table::OtpSessions => {
            use otp_session::Column as Col;
            let unused = (Col::Id, Col::ExpiresAt, Col::PaymentId);
            delete_unused::<otp_session::Entity, _>(c, unused, before, cutoff, limit).await
        }
        Table::QrNonces => {
            use qr_nonce::Column as Col;
            let unused = (Col::Id, Col::ExpiresAt, Col::PaymentId);
            delete_unused::<qr_nonce::Entity, _>(c, unused, before, cutoff, limit).await
        }
        Table::WebhookDeliveries => {
            use webhook_delivery::Column as Col;
            delete_first::<webhook_delivery::Entity, _>(
                c,
                Col::Id,
                Condition::all()
                    .add(Col::Id.lt(before))
                    .add(Col::State.is_in(["DELIVERED", "DEAD"])),
                limit,
            )
            .await
        }
        Table::WebhookAttempts => {
            use webhook_attempt::Column as Col;
            delete_first::<webhook_attempt::Entity, _>(
                c,
                Col::Id,
                Condition::all().add(Col::Id.lt(before)),
                limit,
            )
            .await
        }
        // A run's own `expires_at` says when it goes (its retention was set when it was asked).
        Table::ReportRuns => crate::store::ledger::reports::prune_expired(c, cutoff, limit).await,
        Table::SandboxMessages => {
            use sandbox_message::Column as Col;
            delete_first::<sandbox_message::Entity, _>(
                c,
                Col::Id,
                Condition::all().add(Col::Id.lt(before)),
                limit,
            )
            .await
        }
    }
}

/// A single-use credential (id, expiry, the payment it paid) that expired before `cutoff`
/// without paying.
async fn delete_unused<E, C>(
    c: &C,
    (id, expires_at, payment_id): (E::Column, E::Column, E::Column),
    before: uuid::Uuid,
    cutoff: DateTime<Utc>,
    limit: u64,
) -> Result<u64, DbErr>
where
    E: EntityTrait,
    C: ConnectionTrait,
{
    let cond = Condition::all()
        .add(id.lt(before))
        .add(expires_at.lt(cutoff))
        .add(payment_id.is_null());
    delete_first::<E, _>(c, id, cond, limit).await
}

/// `DELETE FROM t WHERE id IN (SELECT id FROM t WHERE cond ORDER BY id LIMIT n)`.
async fn delete_first<E, C>(c: &C, id: E::Column, cond: Condition, limit: u64) -> Result<u64, DbErr>
where
    E: EntityTrait,
    C: ConnectionTrait,
{
    let ids = Query::select()
        .column(id)
        .from(E::default())
        .cond_where(cond)
        .order_by(id, Order::Asc)
        .limit(limit)
        .to_owned();
    Ok(E::delete_many()
        .filter(Expr::col(id).in_subquery(ids))
        .exec(c)
        .await?
        .rows_affected)
}

/// The outbox is also the event history (`GET /events` reads relayed rows for 30 days), so
/// a row goes once it is relayed and older than `cutoff`. Its `event_id` is a UUIDv7 taken
/// at insert, under a unique index: the same range scan as every other table here.
async fn prune_outbox<C: ConnectionTrait>(
    c: &C,
    cutoff: DateTime<Utc>,
    limit: u64,
) -> Result<u64, DbErr> {
    use outbox::Column as Col;
    delete_first::<outbox::Entity, _>(
        c,
        Col::EventId,
        Condition::all()
            .add(Col::EventId.lt(uuid_v7_floor(cutoff)))
            .add(Col::RelayedAt.is_not_null()),
        limit,
    )
    .await
}

/// The job queue's own tables (apalis): rows that finished before `cutoff`, found through
/// the partial index on `done_at` that `job_queue::Queue::setup` creates.
async fn prune_finished_jobs<C: ConnectionTrait>(
    c: &C,
    cutoff: DateTime<Utc>,
    limit: u64,
) -> Result<u64, DbErr> {
    let backend = c.get_database_backend();
    let (sql, cutoff) = match backend {
        DbBackend::Postgres => (
            format!(
                "DELETE FROM apalis.jobs WHERE id IN (SELECT id FROM apalis.jobs \
                 WHERE {FINISHED} AND done_at < $1 ORDER BY done_at LIMIT $2)"
            ),
            sea_orm::Value::from(cutoff),
        ),
        _ => (
            // apalis-sqlite keeps done_at as Unix seconds.
            format!(
                "DELETE FROM Jobs WHERE id IN (SELECT id FROM Jobs \
                 WHERE {FINISHED} AND done_at < ? ORDER BY done_at LIMIT ?)"
            ),
            sea_orm::Value::from(cutoff.timestamp()),
        ),
    };
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    Ok(c.execute_raw(Statement::from_sql_and_values(
        backend,
        sql,
        [cutoff, limit.into()],
    ))
    .await?
    .rows_affected())
}
