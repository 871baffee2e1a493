//! Disputes of payments and top-ups, and top-up reversals (a top-up's credit taken back).
use entities::{dispute, topup, topup_reversal};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use crate::store::{for_update, payments::TransactionFilter};

pub async fn insert<C: ConnectionTrait>(c: &C, d: dispute::Model) -> Result<(), DbErr> {
    d.into_active_model().insert(c).await.map(|_| ())
}

/// The dispute of `transaction_id` named `id`, locked until the transaction ends.
pub async fn lock<C: ConnectionTrait>(
    c: &C,
    transaction_id: Uuid,
    id: Uuid,
) -> Result<Option<dispute::Model>, DbErr> {
    let q =
        dispute::Entity::find_by_id(id).filter(dispute::Column::TransactionId.eq(transaction_id));
    for_update(c, q).one(c).await
}

pub async fn update<C: ConnectionTrait>(c: &C, d: dispute::Model) -> Result<(), DbErr> {
    d.into_active_model()
        .reset_all()
        .update(c)
        .await
        .map(|_| ())
}

/// A transaction's disputes, oldest first.
pub async fn of_transaction<C: ConnectionTrait>(
    c: &C,
    transaction_id: Uuid,
) -> Result<Vec<dispute::Model>, DbErr> {
    dispute::Entity::find()
        .filter(dispute::Column::TransactionId.eq(transaction_id))
        .order_by_asc(dispute::Column::Id)
        .all(c)
        .await
}

pub async fn insert_reversal<C: ConnectionTrait>(
    c: &C,
    r: topup_reversal::Model,
) -> Result<(), DbErr> {
    r.into_active_model().insert(c).await.map(|_| ())
}

pub async fn reversal_of<C: ConnectionTrait>(
    c: &C,
    topup_id: Uuid,
) -> Result<Option<topup_reversal::Model>, DbErr> {
    topup_reversal::Entity::find()
        .filter(topup_reversal::Column::TopupId.eq(topup_id))
        .one(c)
        .await
}

/// The top-up reversals of the filter's integration that happened in its window, newest
/// first, each with its top-up (the feed's movements of money taken back).
pub async fn reversals_page<C: ConnectionTrait>(
    c: &C,
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<(topup_reversal::Model, topup::Model)>, DbErr> {
    // A top-up whose credit was taken back is `reversed`; no other status has a reversal.
    if f.status
        .is_some_and(|s| s != crate::store::payments::FeedStatus::Reversed)
    {
        return Ok(Vec::new());
    }
    let rows = reversals_select(f, after, limit).all(c).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(r, t)| t.map(|t| (r, t)))
        .collect())
}

/// `reversals_page`'s query, served in order by `ix_topup_reversals_integration`.
pub fn reversals_select(
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> sea_orm::SelectTwo<topup_reversal::Entity, topup::Entity> {
    topup_reversal::Entity::find()
        .find_also_related(topup::Entity)
        .filter(topup_reversal::Column::IntegrationId.eq(f.integration_id))
        .filter(f.window(
            after,
            topup_reversal::Column::Id,
            topup_reversal::Column::CreatedAt,
            topup_reversal::Column::MerchantId,
            topup::Column::BranchId,
        ))
        .order_by_desc(topup_reversal::Column::Id)
        .limit(limit)
}
