//! Wallet identities, wallets and their promotional grants. Every finder takes the merchant,
//! so a wallet of another tenant is simply not found.
use chrono::{DateTime, Utc};
use entities::{
    promo_grant, promo_grant::PromoGrantState, wallet, wallet_user, wallet_user::WalletUserState,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, FromQueryResult,
    QueryFilter, QueryOrder, QueryTrait, Set, sea_query::Values,
};
use uuid::Uuid;

use crate::store::db::template::{Args, Template};

pub async fn find_identity_by_phone<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    phone: &str,
) -> Result<Option<wallet_user::Model>, DbErr> {
    wallet_user::Entity::find()
        .filter(wallet_user::Column::MerchantId.eq(merchant_id))
        .filter(wallet_user::Column::Phone.eq(phone))
        .one(c)
        .await
}

pub async fn find_identity<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<wallet_user::Model>, DbErr> {
    wallet_user::Entity::find_by_id(id)
        .filter(wallet_user::Column::MerchantId.eq(merchant_id))
        .one(c)
        .await
}

/// The identity, locked until the transaction ends (QR mints for one customer queue here;
/// payments never lock identities, so this cannot close a circle with them).
pub async fn lock_identity<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<wallet_user::Model>, DbErr> {
    let q =
        wallet_user::Entity::find_by_id(id).filter(wallet_user::Column::MerchantId.eq(merchant_id));
    crate::store::for_update(c, q).one(c).await
}

pub async fn insert_identity<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    phone: &str,
    state: WalletUserState,
    now: DateTime<Utc>,
) -> Result<wallet_user::Model, DbErr> {
    wallet_user::ActiveModel {
        id: Set(Uuid::now_v7()),
        merchant_id: Set(merchant_id),
        phone: Set(phone.to_string()),
        state: Set(state),
        provider_customer_id: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
        verified_at: Set((state == WalletUserState::Verified).then_some(now)),
    }
    .insert(c)
    .await
}

pub async fn insert_wallet<C: ConnectionTrait>(
    c: &C,
    identity: &wallet_user::Model,
    program_id: Uuid,
    currency: &str,
    now: DateTime<Utc>,
) -> Result<wallet::Model, DbErr> {
    wallet::ActiveModel {
        id: Set(Uuid::now_v7()),
        wallet_user_id: Set(identity.id),
        merchant_id: Set(identity.merchant_id),
        wallet_program_id: Set(program_id),
        currency: Set(currency.to_string()),
        actual_minor: Set(0),
        pending_topups_minor: Set(0),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(c)
    .await
}

/// The identity's wallets, oldest first.
pub async fn wallets_of_identity<C: ConnectionTrait>(
    c: &C,
    identity_id: Uuid,
) -> Result<Vec<wallet::Model>, DbErr> {
    wallet::Entity::find()
        .filter(wallet::Column::WalletUserId.eq(identity_id))
        .order_by_asc(wallet::Column::CreatedAt)
        .all(c)
        .await
}

pub async fn find_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<wallet::Model>, DbErr> {
    wallet::Entity::find_by_id(id)
        .filter(wallet::Column::MerchantId.eq(merchant_id))
        .one(c)
        .await
}

/// The wallet, locked until the transaction ends: every movement of one wallet's money
/// (payments, refunds, credits) queues here, so none of them reads a stale balance. SQLite's
/// IMMEDIATE transaction already holds the database's only write lock.
pub async fn lock_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<wallet::Model>, DbErr> {
    let q = wallet::Entity::find_by_id(id).filter(wallet::Column::MerchantId.eq(merchant_id));
    crate::store::for_update(c, q).one(c).await
}

/// The wallet with its owner's identity, in one round trip.
pub async fn find_wallet_with_owner<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<(wallet::Model, wallet_user::Model)>, DbErr> {
    with_owner(wallet_with_owner(merchant_id, id).one(c).await?)
}

/// The states of a grant that still matter for a balance.
pub(super) const LIVE_GRANT_STATES: [&str; 2] = [
    PromoGrantState::Released.as_str(),
    PromoGrantState::Locked.as_str(),
];

fn wallet_with_owner(
    merchant_id: Uuid,
    id: Uuid,
) -> sea_orm::SelectTwo<wallet::Entity, wallet_user::Entity> {
    wallet::Entity::find_by_id(id)
        .filter(wallet::Column::MerchantId.eq(merchant_id))
        .find_also_related(wallet_user::Entity)
        .filter(wallet_user::Column::MerchantId.eq(merchant_id))
}

fn with_owner(
    row: Option<(wallet::Model, Option<wallet_user::Model>)>,
) -> Result<Option<(wallet::Model, wallet_user::Model)>, DbErr> {
    Ok(row.and_then(|(w, who)| Some((w, who?))))
}

/// The wallet's grants that still matter for a balance: everything not in an end state.
pub async fn live_grants<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
) -> Result<Vec<promo_grant::Model>, DbErr> {
    // Read on every payment: a template (`store::db::template`).
    static LIVE_GRANTS: Template = Template::new();
    let backend = c.get_database_backend();
    let statement = LIVE_GRANTS.statement(backend, 0, &[wallet_id.into()], |a| {
        live_grants_select(backend, a)
    })?;
    promo_grant::Model::find_by_statement(statement)
        .all(c)
        .await
}

fn live_grants_select(backend: DbBackend, a: &Args) -> (String, Values) {
    let s = promo_grant::Entity::find()
        .filter(promo_grant::Column::WalletId.eq(a.get(0)))
        .filter(promo_grant::Column::State.is_in(LIVE_GRANT_STATES))
        .order_by_asc(promo_grant::Column::ExpiresAt)
        .order_by_asc(promo_grant::Column::CreatedAt)
        .build(backend);
    (s.sql, s.values.unwrap_or_else(|| Values(Vec::new())))
}

pub async fn grants_by_ids<C: ConnectionTrait>(
    c: &C,
    ids: &[Uuid],
) -> Result<Vec<promo_grant::Model>, DbErr> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    promo_grant::Entity::find()
        .filter(promo_grant::Column::Id.is_in(ids.iter().copied()))
        .all(c)
        .await
}

pub async fn insert_grant<C: ConnectionTrait>(
    c: &C,
    wallet: &wallet::Model,
    amount_minor: i64,
    source: &str,
    state: PromoGrantState,
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<promo_grant::Model, DbErr> {
    // Created empty: the accrual posting that funds it moves `remaining_minor`.
    promo_grant::ActiveModel {
        id: Set(Uuid::now_v7()),
        wallet_id: Set(wallet.id),
        merchant_id: Set(wallet.merchant_id),
        source: Set(source.to_string()),
        state: Set(state),
        currency: Set(wallet.currency.clone()),
        original_minor: Set(amount_minor),
        remaining_minor: Set(0),
        expires_at: Set(expires_at),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(c)
    .await
}

/// Operators only: a wallet of any merchant.
pub async fn find_wallet_any_merchant<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<wallet::Model>, DbErr> {
    wallet::Entity::find_by_id(id).one(c).await
}

/// The wallet's grants in every state, newest first.
pub async fn recent_grants<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
    limit: u64,
) -> Result<Vec<promo_grant::Model>, DbErr> {
    use sea_orm::QuerySelect;
    promo_grant::Entity::find()
        .filter(promo_grant::Column::WalletId.eq(wallet_id))
        .order_by_desc(promo_grant::Column::CreatedAt)
        .limit(limit)
        .all(c)
        .await
}

/// Every grant of the wallet in one of `states`, oldest first.
pub async fn grants_in_states<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
    states: &[PromoGrantState],
) -> Result<Vec<promo_grant::Model>, DbErr> {
    promo_grant::Entity::find()
        .filter(promo_grant::Column::WalletId.eq(wallet_id))
        .filter(promo_grant::Column::State.is_in(states.iter().map(|s| s.as_str())))
        .order_by_asc(promo_grant::Column::CreatedAt)
        .all(c)
        .await
}

/// Moves grants from LOCKED to RELEASED (only those still LOCKED: a clawback that got
/// there first wins). Returns how many moved.
pub async fn release_grants<C: ConnectionTrait>(
    c: &C,
    ids: &[Uuid],
    now: DateTime<Utc>,
) -> Result<u64, DbErr> {
    if ids.is_empty() {
        return Ok(0);
    }
    let r = promo_grant::Entity::update_many()
        .col_expr(
            promo_grant::Column::State,
            PromoGrantState::Released.as_str().into(),
        )
        .col_expr(promo_grant::Column::UpdatedAt, now.into())
        .filter(promo_grant::Column::Id.is_in(ids.iter().copied()))
        .filter(promo_grant::Column::State.eq(PromoGrantState::Locked.as_str()))
        .exec(c)
        .await?;
    Ok(r.rows_affected)
}

/// Creates the identity unless one already exists for (merchant, phone); either way returns
/// the row, so two concurrent first enrollments of one phone end with one identity.
pub async fn insert_identity_if_absent<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    phone: &str,
    state: WalletUserState,
    now: DateTime<Utc>,
) -> Result<(wallet_user::Model, bool), DbErr> {
    let id = Uuid::now_v7();
    let r = wallet_user::Entity::insert(wallet_user::ActiveModel {
        id: Set(id),
        merchant_id: Set(merchant_id),
        phone: Set(phone.to_string()),
        state: Set(state),
        provider_customer_id: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
        verified_at: Set((state == WalletUserState::Verified).then_some(now)),
    })
    .on_conflict_do_nothing_on([wallet_user::Column::MerchantId, wallet_user::Column::Phone])
    .exec(c)
    .await?;
    let created = matches!(r, sea_orm::TryInsertResult::Inserted(_));
    let row = find_identity_by_phone(c, merchant_id, phone)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("wallet identity after upsert".into()))?;
    let created = created && row.id == id;
    Ok((row, created))
}

/// Grants of one identity's wallets, newest first, after `after` (a grant id: ids are
/// time-ordered), optionally in one state and from one source.
pub async fn grants_page<C: ConnectionTrait>(
    c: &C,
    wallet_ids: &[Uuid],
    state: Option<&str>,
    source: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<promo_grant::Model>, DbErr> {
    use sea_orm::QuerySelect;
    if wallet_ids.is_empty() {
        return Ok(vec![]);
    }
    let mut q = promo_grant::Entity::find()
        .filter(promo_grant::Column::WalletId.is_in(wallet_ids.iter().copied()));
    if let Some(s) = state {
        q = q.filter(promo_grant::Column::State.eq(s));
    }
    if let Some(s) = source {
        q = q.filter(promo_grant::Column::Source.eq(s));
    }
    if let Some(a) = after {
        q = q.filter(promo_grant::Column::Id.lt(a));
    }
    q.order_by_desc(promo_grant::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

pub async fn find_grant<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<promo_grant::Model>, DbErr> {
    promo_grant::Entity::find_by_id(id).one(c).await
}

/// Live grants (RELEASED or LOCKED) whose expiry has passed, oldest first.
pub async fn due_grants<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
    limit: u64,
) -> Result<Vec<promo_grant::Model>, DbErr> {
    use sea_orm::{QueryFilter, QuerySelect, QueryTrait};
    promo_grant::Entity::find()
        .filter(promo_grant::Column::State.is_in(LIVE_GRANT_STATES))
        .filter(promo_grant::Column::ExpiresAt.lte(now))
        .apply_if(merchants, |q, m| {
            q.filter(promo_grant::Column::MerchantId.is_in(m.iter().copied()))
        })
        .order_by_asc(promo_grant::Column::ExpiresAt)
        .limit(limit)
        .all(c)
        .await
}

/// Ends a grant as EXPIRED or CLAWED_BACK. The caller checked it was live under the
/// wallet lock; the posting that took its remainder may have marked it CONSUMED already.
pub async fn end_grant<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    to: PromoGrantState,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    use PromoGrantState::{Consumed, Locked, Released};
    let r = promo_grant::Entity::update_many()
        .col_expr(promo_grant::Column::State, to.as_str().into())
        .col_expr(promo_grant::Column::UpdatedAt, now.into())
        .filter(promo_grant::Column::Id.eq(id))
        .filter(promo_grant::Column::State.is_in([
            Released.as_str(),
            Locked.as_str(),
            Consumed.as_str(),
        ]))
        .exec(c)
        .await?;
    Ok(r.rows_affected == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_grants_template_binds_the_wallet_of_each_call() {
        let t = Template::new();
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            for _ in 0..2 {
                let args = [Uuid::now_v7().into()];
                let direct = live_grants_select(backend, &Args::Values(&args));
                let made = t
                    .statement(backend, 0, &args, |a| live_grants_select(backend, a))
                    .unwrap();
                assert_eq!((made.sql, made.values), (direct.0, Some(direct.1)));
            }
        }
    }
}
