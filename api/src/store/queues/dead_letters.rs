use chrono::{DateTime, Utc};
use entities::{dead_letter, dead_letter::DeadLetterStatus};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select,
    Set,
    sea_query::{Expr, OnConflict},
};
use serde_json::Value;
use uuid::Uuid;

pub struct NewDeadLetter<'a> {
    pub job_id: Uuid,
    pub queue: &'a str,
    pub job_type: &'a str,
    pub merchant_id: Option<Uuid>,
    pub payload: Value,
    pub attempts: i32,
    pub error_history: Value,
    pub last_error: &'a str,
    pub first_enqueued_at: DateTime<Utc>,
    pub dead_at: DateTime<Utc>,
}

/// Records a job that used its last attempt. A job id is dead-lettered once; a second
/// report of the same death (a redelivered final attempt) changes nothing.
pub async fn insert_once<C: ConnectionTrait>(c: &C, d: NewDeadLetter<'_>) -> Result<(), DbErr> {
    let res = dead_letter::Entity::insert(dead_letter::ActiveModel {
        id: Set(Uuid::now_v7()),
        job_id: Set(d.job_id),
        queue: Set(d.queue.to_string()),
        job_type: Set(d.job_type.to_string()),
        merchant_id: Set(d.merchant_id),
        payload: Set(d.payload),
        attempts: Set(d.attempts),
        error_history: Set(d.error_history),
        last_error: Set(d.last_error.to_string()),
        status: Set(DeadLetterStatus::Dead),
        first_enqueued_at: Set(d.first_enqueued_at),
        dead_at: Set(d.dead_at),
        replay_count: Set(0),
        replayed_at: Set(None),
        purged_at: Set(None),
        purge_reason: Set(None),
    })
    .on_conflict(
        OnConflict::column(dead_letter::Column::JobId)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(c)
    .await;
    match res {
        Ok(_) | Err(DbErr::RecordNotInserted) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Which dead letters an operator means. Every field narrows; the ids are UUIDv7 taken
/// when the job died, so "dead before T" is an `id` range and every list is newest first
/// on an index of `(status, <one other filter>, id)` (migration 000018). Error text is
/// matched case-insensitively, through a trigram index on PostgreSQL.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub status: Option<String>,
    pub queue: Option<String>,
    pub job_type: Option<String>,
    /// A platform tenant: letters of the merchants linked to this integration.
    pub integration_id: Option<Uuid>,
    pub merchant_id: Option<Uuid>,
    pub dead_before: Option<DateTime<Utc>>,
    pub error_contains: Option<String>,
}

fn select(f: &Filter) -> Select<dead_letter::Entity> {
    use entities::integration_enterprise as link;
    let mut q = dead_letter::Entity::find();
    if let Some(s) = &f.status {
        q = q.filter(dead_letter::Column::Status.eq(s.clone()));
    }
    if let Some(s) = &f.queue {
        q = q.filter(dead_letter::Column::Queue.eq(s.clone()));
    }
    if let Some(s) = &f.job_type {
        q = q.filter(dead_letter::Column::JobType.eq(s.clone()));
    }
    if let Some(i) = f.integration_id {
        q = q.filter(
            dead_letter::Column::MerchantId.in_subquery(
                sea_orm::sea_query::Query::select()
                    .column(link::Column::EnterpriseId)
                    .from(link::Entity)
                    .and_where(link::Column::IntegrationId.eq(i))
                    .to_owned(),
            ),
        );
    }
    if let Some(m) = f.merchant_id {
        q = q.filter(dead_letter::Column::MerchantId.eq(m));
    }
    if let Some(t) = f.dead_before {
        q = q.filter(dead_letter::Column::Id.lt(crate::store::uuid_v7_floor(t)));
    }
    if let Some(s) = &f.error_contains {
        q = q.filter(crate::store::contains_any_case(
            dead_letter::Column::LastError,
            s,
        ));
    }
    q
}

/// Letters matching `f`, newest first, before the cursor `before`.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    f: &Filter,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<dead_letter::Model>, DbErr> {
    let mut q = select(f);
    if let Some(b) = before {
        q = q.filter(dead_letter::Column::Id.lt(b));
    }
    q.order_by_desc(dead_letter::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

/// How many letters match `f`.
pub async fn count<C: ConnectionTrait>(c: &C, f: &Filter) -> Result<u64, DbErr> {
    use sea_orm::PaginatorTrait;
    select(f).count(c).await
}

/// Dead letters still `dead`, per queue (an index-only read of `(status, queue, id)`).
pub async fn dead_per_queue<C: ConnectionTrait>(c: &C) -> Result<Vec<(String, i64)>, DbErr> {
    dead_letter::Entity::find()
        .select_only()
        .column(dead_letter::Column::Queue)
        .column_as(dead_letter::Column::Id.count(), "n")
        .filter(dead_letter::Column::Status.eq(DeadLetterStatus::Dead.as_str()))
        .group_by(dead_letter::Column::Queue)
        .order_by_asc(dead_letter::Column::Queue)
        .into_tuple()
        .all(c)
        .await
}

pub async fn find<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<dead_letter::Model>, DbErr> {
    dead_letter::Entity::find_by_id(id).one(c).await
}

/// Marks `dl` replayed if it is still `dead`; returns how many rows changed (0 or 1).
pub async fn mark_replayed<C: ConnectionTrait>(
    c: &C,
    dl: &dead_letter::Model,
    now: DateTime<Utc>,
) -> Result<u64, DbErr> {
    Ok(dead_letter::Entity::update_many()
        .col_expr(
            dead_letter::Column::Status,
            Expr::value(DeadLetterStatus::Replayed.as_str()),
        )
        .col_expr(
            dead_letter::Column::ReplayCount,
            Expr::value(dl.replay_count + 1),
        )
        .col_expr(dead_letter::Column::ReplayedAt, Expr::value(Some(now)))
        .filter(dead_letter::Column::Id.eq(dl.id))
        .filter(dead_letter::Column::Status.eq(DeadLetterStatus::Dead.as_str()))
        .exec(c)
        .await?
        .rows_affected)
}

/// Marks the letter purged with `reason` if it is still `dead`; returns how many rows
/// changed (0 or 1).
pub async fn mark_purged<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<u64, DbErr> {
    Ok(dead_letter::Entity::update_many()
        .col_expr(
            dead_letter::Column::Status,
            Expr::value(DeadLetterStatus::Purged.as_str()),
        )
        .col_expr(dead_letter::Column::PurgedAt, Expr::value(Some(now)))
        .col_expr(
            dead_letter::Column::PurgeReason,
            Expr::value(Some(reason.to_string())),
        )
        .filter(dead_letter::Column::Id.eq(id))
        .filter(dead_letter::Column::Status.eq(DeadLetterStatus::Dead.as_str()))
        .exec(c)
        .await?
        .rows_affected)
}
