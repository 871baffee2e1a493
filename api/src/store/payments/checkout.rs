//! Checkout sessions.
use chrono::{DateTime, Utc};
use entities::checkout_session;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryTrait,
};
use uuid::Uuid;

use crate::store::for_update;

pub async fn insert<C: ConnectionTrait>(c: &C, s: checkout_session::Model) -> Result<(), DbErr> {
    s.into_active_model().insert(c).await.map(|_| ())
}

/// The session, if it belongs to this integration and merchant.
pub async fn find<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    id: Uuid,
) -> Result<Option<checkout_session::Model>, DbErr> {
    checkout_session::Entity::find_by_id(id)
        .filter(checkout_session::Column::IntegrationId.eq(integration_id))
        .one(c)
        .await
}

/// The session, locked: identify, cancel and the payment that completes it queue here.
pub async fn lock<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    id: Uuid,
) -> Result<Option<checkout_session::Model>, DbErr> {
    let q = checkout_session::Entity::find_by_id(id)
        .filter(checkout_session::Column::IntegrationId.eq(integration_id));
    for_update(c, q).one(c).await
}

pub async fn update<C: ConnectionTrait>(c: &C, s: checkout_session::Model) -> Result<(), DbErr> {
    s.into_active_model()
        .reset_all()
        .update(c)
        .await
        .map(|_| ())
}

/// Marks open sessions past their deadline EXPIRED. One idempotent UPDATE: safe on any
/// number of workers at once.
pub async fn expire_due<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
) -> Result<u64, DbErr> {
    use sea_orm::sea_query::Expr;
    let r = checkout_session::Entity::update_many()
        .col_expr(
            checkout_session::Column::State,
            Expr::value(checkout_session::CheckoutState::Expired.as_str()),
        )
        .col_expr(
            checkout_session::Column::ClosedAt,
            Expr::col(checkout_session::Column::ExpiresAt),
        )
        .col_expr(checkout_session::Column::UpdatedAt, Expr::value(now))
        .col_expr(
            checkout_session::Column::CloseReason,
            Expr::value("timeout"),
        )
        .filter(checkout_session::Column::State.is_in([
            checkout_session::CheckoutState::Open.as_str(),
            checkout_session::CheckoutState::Identified.as_str(),
        ]))
        .filter(checkout_session::Column::ExpiresAt.lte(now))
        .apply_if(merchants, |q, m| {
            q.filter(checkout_session::Column::MerchantId.is_in(m.iter().copied()))
        })
        .exec(c)
        .await?;
    Ok(r.rows_affected)
}
