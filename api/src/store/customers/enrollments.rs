//! Enrollments (pending-proof windows) and the links that name a verified identity.
use chrono::{DateTime, Utc};
use entities::{enrollment, identity_link, wallet_user, wallet_user::WalletUserState};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use uuid::Uuid;

use crate::store::for_update;

pub async fn insert<C: ConnectionTrait>(c: &C, e: enrollment::Model) -> Result<(), DbErr> {
    e.into_active_model().insert(c).await.map(|_| ())
}

/// The identity's open window, if any.
pub async fn pending_of<C: ConnectionTrait>(
    c: &C,
    wallet_user_id: Uuid,
) -> Result<Option<enrollment::Model>, DbErr> {
    enrollment::Entity::find()
        .filter(enrollment::Column::WalletUserId.eq(wallet_user_id))
        .filter(enrollment::Column::Status.eq(enrollment::EnrollmentStatus::Pending.as_str()))
        .order_by_desc(enrollment::Column::CreatedAt)
        .one(c)
        .await
}

/// The identity's latest enrollment in any status.
pub async fn latest_of<C: ConnectionTrait>(
    c: &C,
    wallet_user_id: Uuid,
) -> Result<Option<enrollment::Model>, DbErr> {
    enrollment::Entity::find()
        .filter(enrollment::Column::WalletUserId.eq(wallet_user_id))
        .order_by_desc(enrollment::Column::CreatedAt)
        .one(c)
        .await
}

pub async fn find<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<enrollment::Model>, DbErr> {
    enrollment::Entity::find_by_id(id)
        .filter(enrollment::Column::MerchantId.eq(merchant_id))
        .one(c)
        .await
}

/// The pending enrollment started (or resent) in a checkout session.
pub async fn pending_of_session<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    session_id: Uuid,
) -> Result<Option<enrollment::Model>, DbErr> {
    enrollment::Entity::find()
        .filter(enrollment::Column::MerchantId.eq(merchant_id))
        .filter(enrollment::Column::ServiceSessionId.eq(session_id))
        .filter(enrollment::Column::Status.eq(enrollment::EnrollmentStatus::Pending.as_str()))
        .order_by_desc(enrollment::Column::CreatedAt)
        .one(c)
        .await
}

/// The newest pending enrollment whose code the integration's terminal sent.
pub async fn pending_of_terminal<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    integration_id: Uuid,
    terminal_id: &str,
) -> Result<Option<enrollment::Model>, DbErr> {
    enrollment::Entity::find()
        .filter(enrollment::Column::MerchantId.eq(merchant_id))
        .filter(enrollment::Column::IntegrationId.eq(integration_id))
        .filter(enrollment::Column::TerminalId.eq(terminal_id))
        .filter(enrollment::Column::Status.eq(enrollment::EnrollmentStatus::Pending.as_str()))
        .order_by_desc(enrollment::Column::LastSentAt)
        .one(c)
        .await
}

pub async fn update<C: ConnectionTrait>(c: &C, e: enrollment::Model) -> Result<(), DbErr> {
    e.into_active_model()
        .reset_all()
        .update(c)
        .await
        .map(|_| ())
}

/// Pending windows past their deadline, oldest first, at most `limit`.
pub async fn due<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
    limit: u64,
) -> Result<Vec<enrollment::Model>, DbErr> {
    use sea_orm::QueryTrait;
    enrollment::Entity::find()
        .filter(enrollment::Column::Status.eq(enrollment::EnrollmentStatus::Pending.as_str()))
        .filter(enrollment::Column::ExpiresAt.lte(now))
        .apply_if(merchants, |q, m| {
            q.filter(enrollment::Column::MerchantId.is_in(m.iter().copied()))
        })
        .order_by_asc(enrollment::Column::ExpiresAt)
        .limit(limit)
        .all(c)
        .await
}

pub async fn set_identity_state<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    state: WalletUserState,
    provider_customer_id: Option<String>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut am = wallet_user::ActiveModel {
        id: Set(id),
        state: Set(state),
        updated_at: Set(now),
        ..Default::default()
    };
    if state == WalletUserState::Verified {
        am.verified_at = Set(Some(now));
    }
    if let Some(p) = provider_customer_id {
        am.provider_customer_id = Set(Some(p));
    }
    am.update(c).await.map(|_| ())
}

pub async fn identity_by_provider_id<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    provider_customer_id: &str,
) -> Result<Option<wallet_user::Model>, DbErr> {
    wallet_user::Entity::find()
        .filter(wallet_user::Column::MerchantId.eq(merchant_id))
        .filter(wallet_user::Column::ProviderCustomerId.eq(provider_customer_id))
        .one(c)
        .await
}

pub async fn identity_by_link<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    kind: &str,
    value_hash: &str,
) -> Result<Option<wallet_user::Model>, DbErr> {
    let link = identity_link::Entity::find()
        .filter(identity_link::Column::MerchantId.eq(merchant_id))
        .filter(identity_link::Column::Kind.eq(kind))
        .filter(identity_link::Column::ValueHash.eq(value_hash))
        .one(c)
        .await?;
    match link {
        Some(l) => {
            crate::store::customers::wallets::find_identity(c, merchant_id, l.wallet_user_id).await
        }
        None => Ok(None),
    }
}

pub async fn insert_link<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    wallet_user_id: Uuid,
    kind: &str,
    value_hash: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    identity_link::ActiveModel {
        id: Set(Uuid::now_v7()),
        merchant_id: Set(merchant_id),
        wallet_user_id: Set(wallet_user_id),
        kind: Set(kind.to_string()),
        value_hash: Set(value_hash.to_string()),
        created_at: Set(now),
    }
    .insert(c)
    .await
    .map(|_| ())
}

/// Locks one enrollment row (the expiry job skips rows another worker holds).
pub async fn lock<C: ConnectionTrait>(c: &C, id: Uuid) -> Result<Option<enrollment::Model>, DbErr> {
    for_update(c, enrollment::Entity::find_by_id(id))
        .one(c)
        .await
}
