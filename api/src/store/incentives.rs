//! Settlements, reload-bonus configs, cashback rules and accruals, budgets and offers.
use chrono::{DateTime, Utc};
use entities::{budget, cashback_rule, offer, payment_reward, reload_bonus_config, settlement};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait},
};
use uuid::Uuid;

use crate::store::for_update;

// --- settlements -------------------------------------------------------------------------

pub async fn lock_settlement<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant_id: Uuid,
    reference: &str,
) -> Result<Option<settlement::Model>, DbErr> {
    let q = settlement::Entity::find()
        .filter(settlement::Column::IntegrationId.eq(integration_id))
        .filter(settlement::Column::MerchantId.eq(merchant_id))
        .filter(settlement::Column::Reference.eq(reference));
    for_update(c, q).one(c).await
}

pub async fn find_settlement<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant_id: Uuid,
    reference: &str,
) -> Result<Option<settlement::Model>, DbErr> {
    settlement::Entity::find()
        .filter(settlement::Column::IntegrationId.eq(integration_id))
        .filter(settlement::Column::MerchantId.eq(merchant_id))
        .filter(settlement::Column::Reference.eq(reference))
        .one(c)
        .await
}

/// Inserts the settlement unless (merchant, reference) exists; true when this call did.
pub async fn insert_settlement_if_absent<C: ConnectionTrait>(
    c: &C,
    s: settlement::Model,
) -> Result<bool, DbErr> {
    let r = settlement::Entity::insert(s.into_active_model())
        .on_conflict_do_nothing_on([
            settlement::Column::IntegrationId,
            settlement::Column::MerchantId,
            settlement::Column::Reference,
        ])
        .exec(c)
        .await?;
    Ok(matches!(r, sea_orm::TryInsertResult::Inserted(_)))
}

pub async fn update_settlement<C: ConnectionTrait>(
    c: &C,
    s: settlement::Model,
) -> Result<settlement::Model, DbErr> {
    s.into_active_model().reset_all().update(c).await
}

// --- versioned configs -------------------------------------------------------------------

pub async fn current_reload_config<C: ConnectionTrait>(
    c: &C,
    program_id: Uuid,
) -> Result<Option<reload_bonus_config::Model>, DbErr> {
    reload_bonus_config::Entity::find()
        .filter(reload_bonus_config::Column::WalletProgramId.eq(program_id))
        .order_by_desc(reload_bonus_config::Column::Version)
        .one(c)
        .await
}

/// The program's reload-bonus config of `version` (what a top-up accrued under).
pub async fn reload_config_version<C: ConnectionTrait>(
    c: &C,
    program_id: Uuid,
    version: i32,
) -> Result<Option<reload_bonus_config::Model>, DbErr> {
    reload_bonus_config::Entity::find()
        .filter(reload_bonus_config::Column::WalletProgramId.eq(program_id))
        .filter(reload_bonus_config::Column::Version.eq(version))
        .one(c)
        .await
}

pub async fn insert_reload_config<C: ConnectionTrait>(
    c: &C,
    m: reload_bonus_config::Model,
) -> Result<reload_bonus_config::Model, DbErr> {
    m.into_active_model().insert(c).await
}

pub async fn current_cashback_rule<C: ConnectionTrait>(
    c: &C,
    program_id: Uuid,
) -> Result<Option<cashback_rule::Model>, DbErr> {
    cashback_rule::Entity::find()
        .filter(cashback_rule::Column::WalletProgramId.eq(program_id))
        .order_by_desc(cashback_rule::Column::Version)
        .one(c)
        .await
}

pub async fn insert_cashback_rule<C: ConnectionTrait>(
    c: &C,
    m: cashback_rule::Model,
) -> Result<cashback_rule::Model, DbErr> {
    m.into_active_model().insert(c).await
}

pub async fn insert_reward<C: ConnectionTrait>(
    c: &C,
    m: payment_reward::Model,
) -> Result<(), DbErr> {
    payment_reward::Entity::insert(m.into_active_model())
        .exec(c)
        .await
        .map(|_| ())
}

pub async fn rewards_of_payment<C: ConnectionTrait>(
    c: &C,
    payment_id: Uuid,
) -> Result<Vec<payment_reward::Model>, DbErr> {
    payment_reward::Entity::find()
        .filter(payment_reward::Column::PaymentId.eq(payment_id))
        .order_by_asc(payment_reward::Column::Id)
        .all(c)
        .await
}

/// Rewards paid into `grant_id` that still have something due back.
pub async fn rewards_owing_on_grant<C: ConnectionTrait>(
    c: &C,
    grant_id: Uuid,
) -> Result<Vec<payment_reward::Model>, DbErr> {
    payment_reward::Entity::find()
        .filter(payment_reward::Column::GrantId.eq(grant_id))
        .filter(payment_reward::Column::UnrecoveredMinor.gt(0))
        .all(c)
        .await
}

pub async fn update_reward<C: ConnectionTrait>(
    c: &C,
    m: payment_reward::Model,
) -> Result<(), DbErr> {
    m.into_active_model()
        .reset_all()
        .update(c)
        .await
        .map(|_| ())
}

// --- budgets -----------------------------------------------------------------------------

pub async fn insert_budget<C: ConnectionTrait>(
    c: &C,
    b: budget::Model,
) -> Result<budget::Model, DbErr> {
    b.into_active_model().insert(c).await
}

pub async fn find_budget<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<budget::Model>, DbErr> {
    budget::Entity::find_by_id(id)
        .filter(budget::Column::MerchantId.eq(merchant_id))
        .one(c)
        .await
}

/// The merchant's budgets in the order they were opened, after the cursor.
pub async fn budgets_page<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<budget::Model>, DbErr> {
    let mut q = budget::Entity::find().filter(budget::Column::MerchantId.eq(merchant_id));
    if let Some(a) = after {
        q = q.filter(budget::Column::Id.gt(a));
    }
    q.order_by_asc(budget::Column::Id).limit(limit).all(c).await
}

/// Adds `amount` (negative gives credit back) to what an active budget spent, in one
/// guarded statement that applies only while the spend stays within [0, limit], and bumps
/// the version. Concurrent writers queue on the row and each re-checks the guard against
/// the committed figures, so none can pass the limit and none fails spuriously.
pub async fn guarded_spend<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let spent = Expr::col(budget::Column::SpentMinor).add(amount);
    let mut q = budget::Entity::update_many()
        .col_expr(budget::Column::SpentMinor, spent.clone())
        .col_expr(
            budget::Column::Version,
            Expr::col(budget::Column::Version).add(1),
        )
        .col_expr(budget::Column::UpdatedAt, Expr::value(now))
        .filter(budget::Column::Id.eq(id))
        .filter(spent.clone().gte(0))
        .filter(spent.lte(Expr::col(budget::Column::LimitMinor)));
    if amount > 0 {
        q = q.filter(budget::Column::Active.eq(true));
    }
    Ok(q.exec(c).await?.rows_affected == 1)
}

/// Compare-and-swap of the budget's terms: applies only while the version is `version`
/// and the new limit still covers what was spent.
pub async fn cas_terms<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    version: i32,
    name: &str,
    limit_minor: i64,
    active: bool,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let r = budget::Entity::update_many()
        .col_expr(budget::Column::Name, Expr::value(name))
        .col_expr(budget::Column::LimitMinor, Expr::value(limit_minor))
        .col_expr(budget::Column::Active, Expr::value(active))
        .col_expr(
            budget::Column::Version,
            Expr::col(budget::Column::Version).add(1),
        )
        .col_expr(budget::Column::UpdatedAt, Expr::value(now))
        .filter(budget::Column::Id.eq(id))
        .filter(budget::Column::Version.eq(version))
        .filter(Expr::col(budget::Column::SpentMinor).lte(limit_minor))
        .exec(c)
        .await?;
    Ok(r.rows_affected == 1)
}

// --- offers ------------------------------------------------------------------------------

pub async fn insert_offer<C: ConnectionTrait>(c: &C, o: offer::Model) -> Result<(), DbErr> {
    offer::Entity::insert(o.into_active_model())
        .exec(c)
        .await
        .map(|_| ())
}

pub async fn find_offer<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<offer::Model>, DbErr> {
    offer::Entity::find_by_id(id)
        .filter(offer::Column::MerchantId.eq(merchant_id))
        .one(c)
        .await
}

pub async fn lock_offer<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<offer::Model>, DbErr> {
    let q = offer::Entity::find_by_id(id).filter(offer::Column::MerchantId.eq(merchant_id));
    for_update(c, q).one(c).await
}

pub async fn update_offer<C: ConnectionTrait>(c: &C, o: offer::Model) -> Result<(), DbErr> {
    o.into_active_model()
        .reset_all()
        .update(c)
        .await
        .map(|_| ())
}

/// The customer's offers, newest first, after the cursor.
pub async fn offers_page<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    wallet_user_id: Option<Uuid>,
    state: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<offer::Model>, DbErr> {
    offers_select(merchant_id, wallet_user_id, state, after, limit)
        .all(c)
        .await
}

/// `offers_page`'s query, served in order by `ix_offers_merchant`.
pub fn offers_select(
    merchant_id: Uuid,
    wallet_user_id: Option<Uuid>,
    state: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
) -> sea_orm::Select<offer::Entity> {
    let mut q = offer::Entity::find().filter(offer::Column::MerchantId.eq(merchant_id));
    if let Some(w) = wallet_user_id {
        q = q.filter(offer::Column::WalletUserId.eq(w));
    }
    if let Some(s) = state {
        q = q.filter(offer::Column::State.eq(s));
    }
    if let Some(a) = after {
        q = q.filter(offer::Column::Id.lt(a));
    }
    q.order_by_desc(offer::Column::Id).limit(limit)
}

/// The customer's ARMED offers (for evaluation), oldest first.
pub async fn armed_offers<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    wallet_user_id: Uuid,
) -> Result<Vec<offer::Model>, DbErr> {
    offer::Entity::find()
        .filter(offer::Column::MerchantId.eq(merchant_id))
        .filter(offer::Column::WalletUserId.eq(wallet_user_id))
        .filter(offer::Column::State.eq(offer::OfferState::Armed.as_str()))
        .order_by_asc(offer::Column::Id)
        .all(c)
        .await
}

pub async fn offer_for_payment<C: ConnectionTrait>(
    c: &C,
    payment_id: Uuid,
) -> Result<Option<offer::Model>, DbErr> {
    offer::Entity::find()
        .filter(offer::Column::PaymentId.eq(payment_id))
        .one(c)
        .await
}

pub async fn due_offers<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
    limit: u64,
) -> Result<Vec<offer::Model>, DbErr> {
    use sea_orm::QueryTrait;
    offer::Entity::find()
        .filter(offer::Column::State.eq(offer::OfferState::Armed.as_str()))
        .filter(offer::Column::ExpiresAt.lte(now))
        .apply_if(merchants, |q, m| {
            q.filter(offer::Column::MerchantId.is_in(m.iter().copied()))
        })
        .order_by_asc(offer::Column::ExpiresAt)
        .limit(limit)
        .all(c)
        .await
}

/// Moves an ARMED offer to `to`; false when it had already left ARMED (another worker or
/// request moved it first).
pub async fn end_armed_offer<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    to: offer::OfferState,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let r = offer::Entity::update_many()
        .col_expr(offer::Column::State, Expr::value(to.as_str()))
        .col_expr(offer::Column::UpdatedAt, Expr::value(now))
        .filter(offer::Column::Id.eq(id))
        .filter(offer::Column::State.eq(offer::OfferState::Armed.as_str()))
        .exec(c)
        .await?;
    Ok(r.rows_affected == 1)
}
