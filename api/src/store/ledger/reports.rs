//! Report runs and their files (chunks in order), in the database in both modes.
use chrono::{DateTime, Utc};
use entities::{report_chunk, report_run, report_run::ReportStatus};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect, Set, sea_query::Expr,
};
use uuid::Uuid;

pub async fn insert<C: ConnectionTrait>(
    c: &C,
    run: report_run::Model,
) -> Result<report_run::Model, DbErr> {
    run.into_active_model().insert(c).await
}

/// The integration's run `id` (another integration's reads as none).
pub async fn find<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    id: Uuid,
) -> Result<Option<report_run::Model>, DbErr> {
    report_run::Entity::find_by_id(id)
        .filter(report_run::Column::IntegrationId.eq(integration_id))
        .one(c)
        .await
}

/// A run by id whoever asked for it (the job that runs it).
pub async fn find_any<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<report_run::Model>, DbErr> {
    report_run::Entity::find_by_id(id).one(c).await
}

/// The integration's runs, newest first, before the cursor's id, acted for `merchant`
/// (all of the integration's when `None`).
pub async fn page<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Option<Uuid>,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<report_run::Model>, DbErr> {
    let mut q =
        report_run::Entity::find().filter(report_run::Column::IntegrationId.eq(integration_id));
    if let Some(m) = merchant {
        q = q.filter(report_run::Column::MerchantId.eq(m));
    }
    if let Some(b) = before {
        q = q.filter(report_run::Column::Id.lt(b));
    }
    q.order_by_desc(report_run::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

/// The latest runs acted for `merchant` (the operations console), newest first.
pub async fn of_merchant<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    limit: u64,
) -> Result<Vec<report_run::Model>, DbErr> {
    report_run::Entity::find()
        .filter(report_run::Column::MerchantId.eq(merchant))
        .order_by_desc(report_run::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

/// Marks the run running (again, after a worker died in it) and drops any part of a file an
/// earlier attempt wrote. `None` when it has already finished.
pub async fn start<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<Option<report_run::Model>, DbErr> {
    let updated = report_run::Entity::update_many()
        .col_expr(
            report_run::Column::Status,
            Expr::value(ReportStatus::Running),
        )
        .col_expr(report_run::Column::StartedAt, Expr::value(Some(now)))
        .filter(report_run::Column::Id.eq(id))
        .filter(report_run::Column::Status.is_in([ReportStatus::Pending, ReportStatus::Running]))
        .exec(c)
        .await?
        .rows_affected;
    if updated == 0 {
        return Ok(None);
    }
    report_chunk::Entity::delete_many()
        .filter(report_chunk::Column::ReportId.eq(id))
        .exec(c)
        .await?;
    find_any(c, id).await
}

pub async fn insert_chunk<C: ConnectionTrait>(
    c: &C,
    report_id: Uuid,
    seq: i32,
    data: Vec<u8>,
) -> Result<(), DbErr> {
    report_chunk::Entity::insert(report_chunk::ActiveModel {
        report_id: Set(report_id),
        seq: Set(seq),
        data: Set(data),
    })
    .exec_without_returning(c)
    .await
    .map(|_| ())
}

/// The file's piece `seq`, if there is one.
pub async fn chunk<C: ConnectionTrait>(
    c: &C,
    report_id: Uuid,
    seq: i32,
) -> Result<Option<Vec<u8>>, DbErr> {
    Ok(report_chunk::Entity::find_by_id((report_id, seq))
        .one(c)
        .await?
        .map(|r| r.data))
}

/// What a finished run made.
pub struct Made {
    pub rows: i64,
    pub bytes: i64,
    pub sha256: String,
}

/// The run succeeded with its file; `false` when it had already finished.
pub async fn succeed<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    made: Made,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    Ok(report_run::Entity::update_many()
        .col_expr(
            report_run::Column::Status,
            Expr::value(ReportStatus::Succeeded),
        )
        .col_expr(report_run::Column::RowCount, Expr::value(Some(made.rows)))
        .col_expr(report_run::Column::ByteSize, Expr::value(Some(made.bytes)))
        .col_expr(report_run::Column::Sha256, Expr::value(Some(made.sha256)))
        .col_expr(report_run::Column::FinishedAt, Expr::value(Some(now)))
        .filter(report_run::Column::Id.eq(id))
        .filter(report_run::Column::Status.eq(ReportStatus::Running))
        .exec(c)
        .await?
        .rows_affected
        == 1)
}

/// The run failed: its partial file goes; `false` when it had already finished.
pub async fn fail<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    error: &str,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let updated = report_run::Entity::update_many()
        .col_expr(
            report_run::Column::Status,
            Expr::value(ReportStatus::Failed),
        )
        .col_expr(
            report_run::Column::Error,
            Expr::value(Some(error.to_string())),
        )
        .col_expr(report_run::Column::FinishedAt, Expr::value(Some(now)))
        .filter(report_run::Column::Id.eq(id))
        .filter(report_run::Column::Status.is_in([ReportStatus::Pending, ReportStatus::Running]))
        .exec(c)
        .await?
        .rows_affected;
    report_chunk::Entity::delete_many()
        .filter(report_chunk::Column::ReportId.eq(id))
        .exec(c)
        .await?;
    Ok(updated == 1)
}

/// Deletes up to `limit` runs that expired by `now`, with their files. Returns how many.
pub async fn prune_expired<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
    limit: u64,
) -> Result<u64, DbErr> {
    let ids: Vec<Uuid> = report_run::Entity::find()
        .select_only()
        .column(report_run::Column::Id)
        .filter(report_run::Column::ExpiresAt.lte(now))
        .order_by_asc(report_run::Column::Id)
        .limit(limit)
        .into_tuple()
        .all(c)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    report_chunk::Entity::delete_many()
        .filter(report_chunk::Column::ReportId.is_in(ids.clone()))
        .exec(c)
        .await?;
    Ok(report_run::Entity::delete_many()
        .filter(report_run::Column::Id.is_in(ids))
        .exec(c)
        .await?
        .rows_affected)
}
