//! Payments, their refunds and voids, OTP sessions and QR nonces.
pub mod checkout;
mod otp_sessions;
pub mod risk;
mod take;

pub use otp_sessions::*;
pub use take::*;

use chrono::{DateTime, Utc};
use entities::{payment, payment::PaymentStatus, payment_refund, qr_nonce};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Select, sea_query::Condition,
};
use uuid::Uuid;

use crate::store::{
    db::{template::Template, writes::Writes},
    for_update,
};

static INSERT: Template = Template::new();

/// Writes the payment when `w` is flushed (nothing to read back: the caller built the row).
pub fn defer_insert(w: &mut Writes, p: payment::Model) {
    w.insert_rows(&INSERT, vec![p.into_active_model()]);
}

pub async fn find<C: ConnectionTrait>(c: &C, id: Uuid) -> Result<Option<payment::Model>, DbErr> {
    payment::Entity::find_by_id(id).one(c).await
}

/// The payment, locked until the transaction ends (refunds and voids of one payment queue).
pub async fn lock<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<payment::Model>, DbErr> {
    let q = payment::Entity::find_by_id(id).filter(payment::Column::MerchantId.eq(merchant_id));
    for_update(c, q).one(c).await
}

/// Records a refund or void on the payment row (which the caller holds locked).
pub async fn set_refunded<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    refunded_minor: i64,
    voided_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut q = payment::Entity::update_many()
        .col_expr(payment::Column::RefundedMinor, refunded_minor.into())
        .col_expr(payment::Column::UpdatedAt, now.into());
    if let Some(at) = voided_at {
        q = q
            .col_expr(
                payment::Column::Status,
                PaymentStatus::Voided.as_str().into(),
            )
            .col_expr(payment::Column::VoidedAt, Some(at).into());
    }
    q.filter(payment::Column::Id.eq(id)).exec(c).await?;
    Ok(())
}

pub async fn insert_refund<C: ConnectionTrait>(
    c: &C,
    r: payment_refund::Model,
) -> Result<(), DbErr> {
    r.into_active_model().insert(c).await.map(|_| ())
}

pub async fn refunds_of<C: ConnectionTrait>(
    c: &C,
    payment_id: Uuid,
) -> Result<Vec<payment_refund::Model>, DbErr> {
    payment_refund::Entity::find()
        .filter(payment_refund::Column::PaymentId.eq(payment_id))
        .order_by_asc(payment_refund::Column::CreatedAt)
        .all(c)
        .await
}

pub async fn insert_qr<C: ConnectionTrait>(c: &C, n: qr_nonce::Model) -> Result<(), DbErr> {
    n.into_active_model().insert(c).await.map(|_| ())
}

/// Marks every earlier nonce of the wallet that is still usable as replaced at `now`.
pub async fn supersede_qr<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    qr_nonce::Entity::update_many()
        .col_expr(qr_nonce::Column::SupersededAt, Some(now).into())
        .filter(qr_nonce::Column::WalletId.eq(wallet_id))
        .filter(qr_nonce::Column::SupersededAt.is_null())
        .filter(qr_nonce::Column::ConsumedAt.is_null())
        .exec(c)
        .await?;
    Ok(())
}

pub async fn short_code_in_use<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    code_hash: &str,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    Ok(qr_nonce::Entity::find()
        .filter(qr_nonce::Column::MerchantId.eq(merchant_id))
        .filter(qr_nonce::Column::ShortCodeHash.eq(code_hash))
        .filter(qr_nonce::Column::ExpiresAt.gt(now))
        .filter(qr_nonce::Column::ConsumedAt.is_null())
        .count(c)
        .await?
        > 0)
}

/// A nonce that can still pay, by hash, without locking or consuming it (identification
/// reads it; only a payment consumes it).
pub async fn find_live_qr_by_hash<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    nonce_hash: &str,
    now: DateTime<Utc>,
) -> Result<Option<qr_nonce::Model>, DbErr> {
    qr_nonce::Entity::find()
        .filter(qr_nonce::Column::MerchantId.eq(merchant_id))
        .filter(qr_nonce::Column::NonceHash.eq(nonce_hash))
        .filter(qr_nonce::Column::ConsumedAt.is_null())
        .filter(qr_nonce::Column::SupersededAt.is_null())
        .filter(qr_nonce::Column::ExpiresAt.gt(now))
        .one(c)
        .await
}

/// Like `find_live_qr_by_hash`, by short code (the newest when two share one).
pub async fn find_live_qr_by_short_code<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    code_hash: &str,
    now: DateTime<Utc>,
) -> Result<Option<qr_nonce::Model>, DbErr> {
    qr_nonce::Entity::find()
        .filter(qr_nonce::Column::MerchantId.eq(merchant_id))
        .filter(qr_nonce::Column::ShortCodeHash.eq(code_hash))
        .filter(qr_nonce::Column::ConsumedAt.is_null())
        .filter(qr_nonce::Column::SupersededAt.is_null())
        .filter(qr_nonce::Column::ExpiresAt.gt(now))
        .order_by_desc(qr_nonce::Column::CreatedAt)
        .one(c)
        .await
}

/// The wallet's latest payments, newest first.
pub async fn recent_of_wallet<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
    limit: u64,
) -> Result<Vec<payment::Model>, DbErr> {
    recent_of_wallet_select(wallet_id, limit).all(c).await
}

/// `recent_of_wallet`'s query, served in order by `ix_payments_wallet_id` (UUIDv7 ids order
/// by creation; on PostgreSQL the id is the partition key, so the newest partition is read
/// first and the read stops at the limit).
pub fn recent_of_wallet_select(wallet_id: Uuid, limit: u64) -> Select<payment::Entity> {
    payment::Entity::find()
        .filter(payment::Column::WalletId.eq(wallet_id))
        .order_by_desc(payment::Column::Id)
        .limit(limit)
}

/// What a transactions page is filtered by.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransactionFilter {
    pub integration_id: Uuid,
    pub status: Option<FeedStatus>,
    /// payment | topup (None: both)
    pub kind: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub branch_id: Option<Uuid>,
    /// The credential's own bounds.
    pub merchant_id: Option<Uuid>,
    pub branch_ids: Option<Vec<Uuid>>,
}

impl TransactionFilter {
    /// The date window, branch, credential bounds and cursor, on any table with these
    /// columns (payments, refunds and top-ups share them; a refund's branch is its payment's).
    pub fn window<C: ColumnTrait, B: ColumnTrait>(
        &self,
        after: Option<Uuid>,
        id: C,
        occurred_at: C,
        merchant_id: C,
        branch_id: B,
    ) -> sea_orm::Condition {
        let mut c = sea_orm::Condition::all();
        if let Some(t) = self.from {
            c = c.add(occurred_at.gte(t));
        }
        if let Some(t) = self.to {
            c = c.add(occurred_at.lt(t));
        }
        if let Some(b) = self.branch_id {
            c = c.add(branch_id.eq(b));
        }
        if let Some(m) = self.merchant_id {
            c = c.add(merchant_id.eq(m));
        }
        if let Some(bs) = &self.branch_ids {
            c = c.add(branch_id.is_in(bs.iter().copied()));
        }
        if let Some(a) = after {
            c = c.add(id.lt(a));
        }
        c
    }

    /// The payment's integration and its status as the feed reports it (see
    /// `domain::payments::Payment::feed_status`).
    fn payment_condition(&self) -> sea_orm::Condition {
        use sea_orm::sea_query::{Expr, ExprTrait};
        let c = Condition::all().add(payment::Column::IntegrationId.eq(self.integration_id));
        let completed = payment::Column::Status.eq(PaymentStatus::Completed.as_str());
        let refunded = Expr::col((payment::Entity, payment::Column::RefundedMinor));
        let amount = Expr::col((payment::Entity, payment::Column::AmountMinor));
        match self.status {
            Some(FeedStatus::Completed) => {
                c.add(completed).add(payment::Column::RefundedMinor.eq(0))
            }
            Some(FeedStatus::PartiallyRefunded) => c
                .add(completed)
                .add(payment::Column::RefundedMinor.gt(0))
                .add(refunded.lt(amount)),
            Some(FeedStatus::Refunded) => c.add(completed).add(refunded.eq(amount)),
            Some(FeedStatus::Voided) => {
                c.add(payment::Column::Status.eq(PaymentStatus::Voided.as_str()))
            }
            Some(FeedStatus::Reversed) | None => c,
        }
    }
}

/// A transaction's status as the reconciliation feed reports and filters it: a payment is
/// completed, partially_refunded, refunded or voided; a top-up completed or reversed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedStatus {
    Completed,
    PartiallyRefunded,
    Refunded,
    Voided,
    Reversed,
}

impl FeedStatus {
    pub fn parse(s: &str) -> Option<FeedStatus> {
        Some(match s {
            "completed" => FeedStatus::Completed,
            "partially_refunded" => FeedStatus::PartiallyRefunded,
            "refunded" => FeedStatus::Refunded,
            "voided" => FeedStatus::Voided,
            "reversed" => FeedStatus::Reversed,
            _ => return None,
        })
    }
}

/// Newest first (UUIDv7 ids order by creation), after the cursor.
pub async fn transactions_page<C: ConnectionTrait>(
    c: &C,
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<payment::Model>, DbErr> {
    transactions_select(f, after, limit).all(c).await
}

/// `transactions_page`'s query, served in order by `ix_payments_integration`.
pub fn transactions_select(
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> Select<payment::Entity> {
    payment::Entity::find()
        .filter(f.payment_condition())
        .filter(f.window(
            after,
            payment::Column::Id,
            payment::Column::CreatedAt,
            payment::Column::MerchantId,
            payment::Column::BranchId,
        ))
        .order_by_desc(payment::Column::Id)
        .limit(limit)
}

/// The refunds and voids of the filter's payments that happened in its window (by when the
/// money went back, not when the sale was), newest first, each with its payment.
pub async fn reversals_page<C: ConnectionTrait>(
    c: &C,
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<(payment_refund::Model, payment::Model)>, DbErr> {
    let rows = reversals_select(f, after, limit).all(c).await?;
    // The join is inner in effect: the filter names the payment's integration.
    Ok(rows
        .into_iter()
        .filter_map(|(r, p)| p.map(|p| (r, p)))
        .collect())
}

/// `reversals_page`'s query, served in order by `ix_payment_refunds_integration`.
pub fn reversals_select(
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> sea_orm::SelectTwo<payment_refund::Entity, payment::Entity> {
    payment_refund::Entity::find()
        .find_also_related(payment::Entity)
        .filter(payment_refund::Column::IntegrationId.eq(f.integration_id))
        .filter(f.payment_condition())
        .filter(f.window(
            after,
            payment_refund::Column::Id,
            payment_refund::Column::CreatedAt,
            payment_refund::Column::MerchantId,
            payment::Column::BranchId,
        ))
        .order_by_desc(payment_refund::Column::Id)
        .limit(limit)
}
