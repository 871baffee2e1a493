//! Risk controls' rows: the blocks (crossings of a threshold), the merchants' velocity
//! limits, and each terminal's last hour of payments (`domain::risk`).
use chrono::{DateTime, Utc};
use entities::{risk_block, risk_limits, risk_terminal_usage};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter, QueryOrder,
    QuerySelect,
    sea_query::{Expr, OnConflict},
};
use uuid::Uuid;

use crate::store::for_update;

/// What a crossing names: the row it is recorded in.
fn same_subject(b: &risk_block::Model) -> sea_orm::Condition {
    use risk_block::Column as Col;
    sea_orm::Condition::all()
        .add(Col::MerchantId.eq(b.merchant_id))
        .add(Col::IsSandbox.eq(b.is_sandbox))
        .add(Col::Scope.eq(b.scope.as_str()))
        .add(Col::Subject.eq(b.subject.as_str()))
        .add(Col::Rule.eq(b.rule.as_str()))
}

/// Records crossing `b` (its `crossed_at` is now). Returns the row when this is a new
/// crossing: none active for its subject and rule, so its event is due. A crossing while one
/// is active only moves that one's counts and end.
pub async fn record_crossing<C: ConnectionTrait>(
    c: &C,
    b: risk_block::Model,
) -> Result<Option<risk_block::Model>, DbErr> {
    use risk_block::Column as Col;
    let now = b.crossed_at;
    // An ended or cleared block of the same subject and rule starts again.
    let restarted = risk_block::Entity::update_many()
        .col_expr(Col::Threshold, Expr::value(b.threshold))
        .col_expr(Col::WindowSecs, Expr::value(b.window_secs))
        .col_expr(Col::Observed, Expr::value(b.observed))
        .col_expr(Col::CrossedAt, Expr::value(now))
        .col_expr(Col::Until, Expr::value(b.until))
        .col_expr(Col::LastSeenAt, Expr::value(now))
        .col_expr(
            Col::Crossings,
            sea_orm::sea_query::ExprTrait::add(Expr::col(Col::Crossings), 1),
        )
        .col_expr(Col::ClearedAt, Expr::value(None::<DateTime<Utc>>))
        .col_expr(Col::ClearedBy, Expr::value(None::<String>))
        .col_expr(Col::ClearReason, Expr::value(None::<String>))
        .filter(same_subject(&b))
        .filter(
            sea_orm::Condition::any()
                .add(Col::Until.lte(now))
                .add(Col::ClearedAt.is_not_null()),
        )
        .exec(c)
        .await?
        .rows_affected;
    if restarted == 1 {
        return find_subject(c, &b).await;
    }
    let inserted = risk_block::Entity::insert(b.clone().into_active_model())
        .on_conflict(
            OnConflict::columns([
                Col::MerchantId,
                Col::IsSandbox,
                Col::Scope,
                Col::Subject,
                Col::Rule,
            ])
            .do_nothing()
            .to_owned(),
        )
        .exec_without_returning(c)
        .await?;
    if inserted == 1 {
        return Ok(Some(b));
    }
    // Active: the same crossing seen again.
    risk_block::Entity::update_many()
        .col_expr(Col::LastSeenAt, Expr::value(now))
        .col_expr(Col::Observed, Expr::value(b.observed))
        .filter(same_subject(&b))
        .exec(c)
        .await?;
    Ok(None)
}

async fn find_subject<C: ConnectionTrait>(
    c: &C,
    b: &risk_block::Model,
) -> Result<Option<risk_block::Model>, DbErr> {
    risk_block::Entity::find()
        .filter(same_subject(b))
        .one(c)
        .await
}

/// Blocks in force at `now` (not ended, not cleared), of one merchant or of all, the
/// newest crossing first.
pub async fn active<C: ConnectionTrait>(
    c: &C,
    merchant: Option<Uuid>,
    now: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<risk_block::Model>, DbErr> {
    use risk_block::Column as Col;
    let mut q = risk_block::Entity::find()
        .filter(Col::Until.gt(now))
        .filter(Col::ClearedAt.is_null());
    if let Some(m) = merchant {
        q = q.filter(Col::MerchantId.eq(m));
    }
    q.order_by_desc(Col::CrossedAt)
        .order_by_desc(Col::Id)
        .limit(limit)
        .all(c)
        .await
}

pub async fn lock_block<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<risk_block::Model>, DbErr> {
    for_update(c, risk_block::Entity::find_by_id(id))
        .one(c)
        .await
}

pub async fn clear_block<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    by: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    use risk_block::Column as Col;
    risk_block::Entity::update_many()
        .col_expr(Col::ClearedAt, Expr::value(now))
        .col_expr(Col::ClearedBy, Expr::value(by))
        .col_expr(Col::ClearReason, Expr::value(reason))
        .filter(Col::Id.eq(id))
        .exec(c)
        .await
        .map(|_| ())
}

pub async fn find_limits<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    sandbox: bool,
) -> Result<Option<risk_limits::Model>, DbErr> {
    risk_limits::Entity::find_by_id((merchant, sandbox))
        .one(c)
        .await
}

/// Writes a merchant's limits for one mode, replacing the ones it had.
pub async fn put_limits<C: ConnectionTrait>(c: &C, l: risk_limits::Model) -> Result<(), DbErr> {
    use risk_limits::Column as Col;
    risk_limits::Entity::insert(l.into_active_model())
        .on_conflict(
            OnConflict::columns([Col::MerchantId, Col::IsSandbox])
                .update_columns([
                    Col::WalletPayments24hCount,
                    Col::WalletPayments24hMinor,
                    Col::WalletPayments7dCount,
                    Col::WalletPayments7dMinor,
                    Col::TerminalPayments1hMinor,
                    Col::PaymentMaxMinor,
                    Col::WalletTopups24hMinor,
                    Col::UpdatedAt,
                    Col::UpdatedBy,
                ])
                .to_owned(),
        )
        .exec_without_returning(c)
        .await
        .map(|_| ())
}

/// The terminal's usage row, created if it has none, locked until the transaction ends.
pub async fn lock_terminal_usage<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    sandbox: bool,
    terminal: &str,
    now: DateTime<Utc>,
) -> Result<risk_terminal_usage::Model, DbErr> {
    use risk_terminal_usage::Column as Col;
    risk_terminal_usage::Entity::insert(
        risk_terminal_usage::Model {
            merchant_id: merchant,
            is_sandbox: sandbox,
            terminal: terminal.to_string(),
            minutes: "{}".into(),
            updated_at: now,
        }
        .into_active_model(),
    )
    .on_conflict(
        OnConflict::columns([Col::MerchantId, Col::IsSandbox, Col::Terminal])
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(c)
    .await?;
    for_update(
        c,
        risk_terminal_usage::Entity::find_by_id((merchant, sandbox, terminal.to_string())),
    )
    .one(c)
    .await?
    .ok_or_else(|| DbErr::RecordNotFound("risk_terminal_usage".into()))
}

pub async fn save_terminal_usage<C: ConnectionTrait>(
    c: &C,
    u: risk_terminal_usage::Model,
) -> Result<(), DbErr> {
    use risk_terminal_usage::Column as Col;
    risk_terminal_usage::Entity::update_many()
        .col_expr(Col::Minutes, Expr::value(u.minutes))
        .col_expr(Col::UpdatedAt, Expr::value(u.updated_at))
        .filter(Col::MerchantId.eq(u.merchant_id))
        .filter(Col::IsSandbox.eq(u.is_sandbox))
        .filter(Col::Terminal.eq(u.terminal))
        .exec(c)
        .await
        .map(|_| ())
}

/// The wallet's payments created after `since` (and not after `now`), oldest first: when
/// and how much. Through the wallet's `(wallet_id, id)` index: payment ids are v7 UUIDs
/// made at the real time of the payment, and a sandbox test clock only ever runs ahead of
/// real time, so no payment after `since` has an id before the real time `since` stands for.
pub async fn wallet_payments_since<C: ConnectionTrait>(
    c: &C,
    wallet: Uuid,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, i64)>, DbErr> {
    use entities::payment::{Column as Col, Entity};
    let real_since = std::cmp::min(since, Utc::now() - (now - since));
    Entity::find()
        .select_only()
        .column(Col::CreatedAt)
        .column(Col::AmountMinor)
        .filter(Col::WalletId.eq(wallet))
        .filter(Col::Id.gte(v7_floor(real_since)))
        .filter(Col::CreatedAt.gt(since))
        .order_by_asc(Col::CreatedAt)
        .into_tuple()
        .all(c)
        .await
}

/// The wallet's credited top-ups created after `since`, oldest first: when and how much.
pub async fn wallet_topups_since<C: ConnectionTrait>(
    c: &C,
    wallet: Uuid,
    since: DateTime<Utc>,
    _now: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, i64)>, DbErr> {
    use entities::topup::{Column as Col, Entity};
    Entity::find()
        .select_only()
        .column(Col::CreatedAt)
        .column(Col::CreditedActualMinor)
        .filter(Col::WalletId.eq(wallet))
        .filter(Col::CreatedAt.gt(since))
        .filter(Col::CreditedActualMinor.gt(0))
        .order_by_asc(Col::CreatedAt)
        .into_tuple()
        .all(c)
        .await
}

/// The smallest v7 UUID of the millisecond `at`.
fn v7_floor(at: DateTime<Utc>) -> Uuid {
    let ms = at.timestamp_millis().max(0) as u64;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = 0x70;
    b[8] = 0x80;
    Uuid::from_bytes(b)
}
