//! SKUs and top-ups.
use entities::{sku, topup};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use crate::store::for_update;

pub async fn find_sku<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    sku_id: &str,
) -> Result<Option<sku::Model>, DbErr> {
    sku::Entity::find()
        .filter(sku::Column::MerchantId.eq(merchant_id))
        .filter(sku::Column::SkuId.eq(sku_id))
        .one(c)
        .await
}

pub async fn lock_sku<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    sku_id: &str,
) -> Result<Option<sku::Model>, DbErr> {
    let q = sku::Entity::find()
        .filter(sku::Column::MerchantId.eq(merchant_id))
        .filter(sku::Column::SkuId.eq(sku_id));
    for_update(c, q).one(c).await
}

/// Inserts the SKU unless (merchant, sku_id) exists; true when this call inserted it.
pub async fn insert_sku_if_absent<C: ConnectionTrait>(c: &C, s: sku::Model) -> Result<bool, DbErr> {
    let r = sku::Entity::insert(s.into_active_model())
        .on_conflict_do_nothing_on([sku::Column::MerchantId, sku::Column::SkuId])
        .exec(c)
        .await?;
    Ok(matches!(r, sea_orm::TryInsertResult::Inserted(_)))
}

pub async fn update_sku<C: ConnectionTrait>(c: &C, s: sku::Model) -> Result<sku::Model, DbErr> {
    s.into_active_model().reset_all().update(c).await
}

/// The merchant's SKUs in the order they were registered, after the cursor.
pub async fn skus_page<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<sku::Model>, DbErr> {
    let mut q = sku::Entity::find().filter(sku::Column::MerchantId.eq(merchant_id));
    if let Some(a) = after {
        q = q.filter(sku::Column::Id.gt(a));
    }
    q.order_by_asc(sku::Column::Id).limit(limit).all(c).await
}

/// Claims (merchant, kind, order_ref) for this transaction with a placeholder row. When
/// another transaction holds or committed the claim, PostgreSQL waits for it to end and
/// this returns false; SQLite's single writer never overlaps.
pub async fn claim<C: ConnectionTrait>(c: &C, placeholder: topup::Model) -> Result<bool, DbErr> {
    let r = topup::Entity::insert(placeholder.into_active_model())
        .on_conflict_do_nothing_on([
            topup::Column::MerchantId,
            topup::Column::Kind,
            topup::Column::OrderRef,
        ])
        .exec(c)
        .await?;
    Ok(matches!(r, sea_orm::TryInsertResult::Inserted(_)))
}

pub async fn find_by_order<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    kind: &str,
    order_ref: &str,
) -> Result<Option<topup::Model>, DbErr> {
    topup::Entity::find()
        .filter(topup::Column::MerchantId.eq(merchant_id))
        .filter(topup::Column::Kind.eq(kind))
        .filter(topup::Column::OrderRef.eq(order_ref))
        .one(c)
        .await
}

pub async fn update<C: ConnectionTrait>(c: &C, t: topup::Model) -> Result<(), DbErr> {
    t.into_active_model()
        .reset_all()
        .update(c)
        .await
        .map(|_| ())
}

/// An integration's credited top-ups, newest first, after the cursor (the feed's other
/// half; see `payments::transactions_page` for the filter).
pub async fn transactions_page<C: ConnectionTrait>(
    c: &C,
    f: &crate::store::payments::TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<topup::Model>, DbErr> {
    // A top-up in the feed was credited: it is `completed`, or `reversed` once its credit
    // was taken back (the credit stays a movement of its day).
    use crate::store::payments::FeedStatus;
    use topup::TopupStatus::{Credited, Reversed};
    let stored: &[&str] = match f.status {
        None => &[Credited.as_str(), Reversed.as_str()],
        Some(FeedStatus::Completed) => &[Credited.as_str()],
        Some(FeedStatus::Reversed) => &[Reversed.as_str()],
        Some(_) => return Ok(Vec::new()),
    };
    transactions_select(f, stored, after, limit).all(c).await
}

/// `transactions_page`'s query, served in order by `ix_topups_integration`.
pub fn transactions_select(
    f: &crate::store::payments::TransactionFilter,
    statuses: &[&str],
    after: Option<Uuid>,
    limit: u64,
) -> sea_orm::Select<topup::Entity> {
    use sea_orm::QuerySelect;
    let q = topup::Entity::find()
        .filter(topup::Column::IntegrationId.eq(f.integration_id))
        // A claim row of a credit still in flight is not a transaction yet, nor is a top-up
        // whose settlement has not credited it.
        .filter(topup::Column::WalletId.ne(Uuid::nil()))
        .filter(topup::Column::Status.is_in(statuses.iter().copied()));
    let q = q.filter(f.window(
        after,
        topup::Column::Id,
        topup::Column::CreatedAt,
        topup::Column::MerchantId,
        topup::Column::BranchId,
    ));
    q.order_by_desc(topup::Column::Id).limit(limit)
}

pub async fn find<C: ConnectionTrait>(c: &C, id: Uuid) -> Result<Option<topup::Model>, DbErr> {
    topup::Entity::find_by_id(id).one(c).await
}
