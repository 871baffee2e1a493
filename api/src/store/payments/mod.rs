//! Payments, their refunds and voids, OTP sessions and QR nonces.
pub mod checkout;
mod otp_sessions;
pub mod risk;

pub use otp_sessions::*;

use chrono::{DateTime, Utc};
use entities::{
    otp_session, otp_session::OtpSessionStatus, payment, payment::PaymentStatus, payment_refund,
    qr_nonce, wallet,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, FromQueryResult,
    IntoActiveModel, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, QueryTrait, Select,
    Statement,
    sea_query::{
        Alias, CommonTableExpression, Condition, Expr, ExprTrait, JoinType, Order,
        PostgresQueryBuilder, Query, SqliteQueryBuilder, UpdateStatement, WithQuery,
    },
};
use uuid::Uuid;

use crate::store::{
    customers::wallets::{self, ForPayment},
    db::writes::Writes,
    for_update,
};

/// Writes the payment when `w` is flushed (nothing to read back: the caller built the row).
pub fn defer_insert(w: &mut Writes, p: payment::Model) {
    w.insert(payment::Entity::insert(p.into_active_model()).into_query());
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

/// Consumes the usable QR nonce with this hash for `payment_id` (the rules of
/// `usable_nonce`) and locks its wallet for the payment (see `take_and_lock`). None when no
/// usable nonce has this hash.
pub async fn take_qr_and_lock_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    nonce_hash: &str,
    at: NonceUse,
) -> Result<Option<ForPayment>, DbErr> {
    let which = Condition::all().add(qr_nonce::Column::NonceHash.eq(nonce_hash));
    let marked = (qr_nonce::Column::NonceHash, nonce_hash);
    take_nonce_and_lock(c, merchant_id, which, marked, at).await
}

/// The payment a nonce is taken for.
#[derive(Clone, Copy, Debug)]
pub struct NonceUse {
    pub payment_id: Uuid,
    /// Whether the payment is a sandbox one (whose limits it reads).
    pub sandbox: bool,
    /// The checkout session the payment completes: a nonce minted in a session pays only
    /// in it.
    pub session: Option<Uuid>,
    pub received_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// Consumes the merchant's OTP session `id` for `payment_id` if it is active and locks its
/// wallet for the payment (see `take_and_lock`). Returns the session as it is now (status
/// `consumed`): the caller checks the rest of it and rolls back on a mismatch. None when the
/// session is unknown or no longer active.
pub async fn take_otp_and_lock_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    sandbox: bool,
    id: Uuid,
    payment_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Option<(ForPayment, otp_session::Model)>, DbErr> {
    let take = otp_session::Entity::update_many()
        .col_expr(
            otp_session::Column::Status,
            OtpSessionStatus::Consumed.as_str().into(),
        )
        .col_expr(otp_session::Column::PaymentId, Some(payment_id).into())
        .col_expr(otp_session::Column::ConsumedAt, Some(now).into())
        .filter(otp_session::Column::Id.eq(id))
        .filter(otp_session::Column::MerchantId.eq(merchant_id))
        .filter(otp_session::Column::Status.eq(OtpSessionStatus::Active.as_str()))
        .into_query();
    let marked = Condition::all()
        .add(Expr::col((Alias::new(TAKEN), otp_session::Column::Id)).eq(id))
        .add(Expr::col((Alias::new(TAKEN), otp_session::Column::PaymentId)).eq(payment_id));
    Ok(
        take_and_lock::<otp_session::Entity, C>(c, (merchant_id, sandbox), take, marked, true)
            .await?
            .and_then(|(found, s)| Some((found, s?))),
    )
}

/// The name the consumed credential's row goes by in `take_and_lock`'s select.
const TAKEN: &str = "taken";

/// Runs `take` (the consumption of a single-use credential of table `E`, which has a
/// `wallet_id` column) and locks the consumed credential's wallet for the payment: one
/// statement on PostgreSQL, where the consumption is a CTE the wallet's select joins, and one
/// call on SQLite, the `UPDATE` and then the select joining the row it marked (`marked`
/// finds it, under the name `TAKEN`). A busy wallet's payments reach its lock a round trip
/// sooner. With `with_row`, the consumed row comes back too, as it is after `take`.
async fn take_and_lock<E: EntityTrait, C: ConnectionTrait>(
    c: &C,
    (merchant_id, sandbox): (Uuid, bool),
    mut take: UpdateStatement,
    marked: Condition,
    with_row: bool,
) -> Result<Option<(ForPayment, Option<E::Model>)>, DbErr> {
    let backend = c.get_database_backend();
    let mut select = wallets::payment_select(backend, merchant_id, sandbox);
    let taken = Alias::new(TAKEN);
    let taken_wallet = Expr::col((taken.clone(), Alias::new("wallet_id")))
        .equals((wallet::Entity, wallet::Column::Id));
    if with_row {
        wallets::select_prefixed_from::<E>(&mut select, &taken, "S_");
    }
    let statement = if backend == DbBackend::Postgres {
        take.returning_all();
        select.join(JoinType::InnerJoin, taken.clone(), taken_wallet);
        let mut cte = CommonTableExpression::new();
        cte.table_name(taken).query(take);
        // In place: `WithClause::query` would clone the statement it returns.
        let (sql, values) = WithQuery::new()
            .cte(cte)
            .query(select)
            .build(PostgresQueryBuilder);
        Statement::from_sql_and_values(backend, sql, values)
    } else {
        select.join_as(
            JoinType::InnerJoin,
            E::default(),
            taken,
            Condition::all().add(taken_wallet).add(marked),
        );
        let (update, mut values) = take.build(SqliteQueryBuilder);
        let (query, more) = select.build(SqliteQueryBuilder);
        values.0.extend(more.0);
        Statement::from_sql_and_values(backend, format!("{update};\n{query}"), values)
    };
    wallets::read_for_payment(c, statement, |row| {
        if with_row {
            E::Model::from_query_result(row, "S_").map(Some)
        } else {
            Ok(None)
        }
    })
    .await
}

/// Consumes the newest unexpired, unconsumed nonce of the merchant carrying this short code
/// for `payment_id`, if it can still pay (the rules of `usable_nonce`), and locks its wallet
/// for the payment (see `take_and_lock`). None when there is no such nonce.
pub async fn take_short_code_and_lock_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    code_hash: &str,
    at: NonceUse,
) -> Result<Option<ForPayment>, DbErr> {
    let now = at.now;
    let newest = Query::select()
        .column(qr_nonce::Column::Id)
        .from(qr_nonce::Entity)
        .and_where(qr_nonce::Column::MerchantId.eq(merchant_id))
        .and_where(qr_nonce::Column::ShortCodeHash.eq(code_hash))
        .and_where(qr_nonce::Column::ConsumedAt.is_null())
        .and_where(qr_nonce::Column::ExpiresAt.gt(now))
        .order_by(qr_nonce::Column::CreatedAt, Order::Desc)
        .limit(1)
        .to_owned();
    let which = Condition::all().add(qr_nonce::Column::Id.in_subquery(newest));
    let marked = (qr_nonce::Column::ShortCodeHash, code_hash);
    take_nonce_and_lock(c, merchant_id, which, marked, at).await
}

/// Consumes for `payment_id` the merchant's nonce that `which` picks, if it can still pay
/// (the rules of `usable_nonce`), and locks its wallet (see `take_and_lock`). `marked`, a
/// column with its value, finds the consumed nonce again on SQLite by an index.
async fn take_nonce_and_lock<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    which: Condition,
    marked: (qr_nonce::Column, &str),
    at: NonceUse,
) -> Result<Option<ForPayment>, DbErr> {
    let NonceUse {
        payment_id,
        session,
        received_at,
        now,
        ..
    } = at;
    // A nonce of a checkout session is, to any other payment, as unknown as no nonce.
    let in_session = match session {
        Some(s) => Condition::any()
            .add(qr_nonce::Column::CheckoutSessionId.is_null())
            .add(qr_nonce::Column::CheckoutSessionId.eq(s)),
        None => Condition::all().add(qr_nonce::Column::CheckoutSessionId.is_null()),
    };
    let take = qr_nonce::Entity::update_many()
        .col_expr(qr_nonce::Column::ConsumedAt, Some(now).into())
        .col_expr(qr_nonce::Column::PaymentId, Some(payment_id).into())
        .filter(which)
        .filter(qr_nonce::Column::MerchantId.eq(merchant_id))
        // Checked on the row itself even where `which` checked it: after waiting for a
        // concurrent payment of the same nonce, PostgreSQL re-checks the row but keeps a
        // sub-select's answer.
        .filter(qr_nonce::Column::ConsumedAt.is_null())
        .filter(qr_nonce::Column::ExpiresAt.gt(now))
        .filter(
            Condition::any()
                .add(qr_nonce::Column::SupersededAt.is_null())
                .add(qr_nonce::Column::SupersededAt.gt(received_at)),
        )
        .filter(in_session)
        .into_query();
    // With the merchant, the short code's own index (merchant, code) finds the row too.
    let marked = Condition::all()
        .add(Expr::col((Alias::new(TAKEN), qr_nonce::Column::MerchantId)).eq(merchant_id))
        .add(Expr::col((Alias::new(TAKEN), marked.0)).eq(marked.1))
        .add(Expr::col((Alias::new(TAKEN), qr_nonce::Column::PaymentId)).eq(payment_id));
    Ok(
        take_and_lock::<qr_nonce::Entity, C>(c, (merchant_id, at.sandbox), take, marked, false)
            .await?
            .map(|(found, _)| found),
    )
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
