//! OTP sessions: minted by an OTP send, counted per wallet and order, read and locked by a
//! payment, and their wrong codes recorded. Taking one for a payment is in `payments`.
use chrono::{DateTime, Utc};
use entities::{otp_session, otp_session::OtpSessionStatus, wallet, wallet_user};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, IntoActiveModel,
    JoinType, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, QueryTrait, RelationDef,
    RelationTrait, Select, Set, sea_query::Values,
};
use uuid::Uuid;

use crate::store::{
    db::{
        positional::Positional,
        template::{Args, Template},
    },
    for_update,
};

pub async fn insert_otp<C: ConnectionTrait>(c: &C, s: otp_session::Model) -> Result<(), DbErr> {
    s.into_active_model().insert(c).await.map(|_| ())
}

/// Sends for one wallet since `since`, across orders.
pub async fn otp_sends_for_wallet_since<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
    since: DateTime<Utc>,
) -> Result<u64, DbErr> {
    otp_sends_for_wallet_select(wallet_id, since).count(c).await
}

/// `otp_sends_for_wallet_since`'s query, found through `ix_otp_sessions_wallet`.
pub fn otp_sends_for_wallet_select(
    wallet_id: Uuid,
    since: DateTime<Utc>,
) -> Select<otp_session::Entity> {
    otp_session::Entity::find()
        .filter(otp_session::Column::WalletId.eq(wallet_id))
        .filter(otp_session::Column::CreatedAt.gt(since))
}

/// Sends for one order since `since`, oldest first (the send limit's window).
pub async fn otp_sends_since<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    order_ref: &str,
    since: DateTime<Utc>,
) -> Result<Vec<DateTime<Utc>>, DbErr> {
    otp_session::Entity::find()
        .select_only()
        .column(otp_session::Column::CreatedAt)
        .filter(otp_session::Column::MerchantId.eq(merchant_id))
        .filter(otp_session::Column::OrderRef.eq(order_ref))
        .filter(otp_session::Column::CreatedAt.gt(since))
        .order_by_asc(otp_session::Column::CreatedAt)
        .into_tuple()
        .all(c)
        .await
}

/// An OTP session of the merchant, read without locking it (the balance check).
pub async fn find_otp<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<otp_session::Model>, DbErr> {
    otp_session::Entity::find_by_id(id)
        .filter(otp_session::Column::MerchantId.eq(merchant_id))
        .one(c)
        .await
}

/// An OTP session of the merchant with the phone of its wallet's owner, read without
/// locking either (the payment's unlocked look at a code, `verify_otp`). None when the
/// session, its wallet or the owner is not the merchant's.
pub async fn find_otp_with_owner_phone<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<(otp_session::Model, String)>, DbErr> {
    // Read on every OTP payment: a template (`store::db::template`).
    static LOOK: Template = Template::new();
    let backend = c.get_database_backend();
    let args = [merchant_id.into(), id.into()];
    let statement = LOOK.statement(backend, 0, &args, |a| otp_with_owner_phone(backend, a))?;
    let Some(row) = c.query_one_raw(statement).await? else {
        return Ok(None);
    };
    // The session's columns come first, in its entity's order (`Select::new`).
    Ok(Some((
        otp_session::Model::read_at(&row, 0)?,
        row.try_get("", OWNER_PHONE)?,
    )))
}

const OWNER_PHONE: &str = "owner_phone";

/// `find_otp_with_owner_phone`'s select of session `a[1]` of merchant `a[0]`.
fn otp_with_owner_phone(backend: DbBackend, a: &Args) -> (String, Values) {
    let to_wallet: RelationDef = otp_session::Entity::belongs_to(wallet::Entity)
        .from(otp_session::Column::WalletId)
        .to(wallet::Column::Id)
        .into();
    let s = otp_session::Entity::find()
        .filter(otp_session::Column::Id.eq(a.get(1)))
        .filter(otp_session::Column::MerchantId.eq(a.get(0)))
        .join(JoinType::InnerJoin, to_wallet)
        .join(JoinType::InnerJoin, wallet::Relation::Owner.def())
        .filter(wallet::Column::MerchantId.eq(a.get(0)))
        .filter(wallet_user::Column::MerchantId.eq(a.get(0)))
        .column_as(wallet_user::Column::Phone, OWNER_PHONE)
        .build(backend);
    (s.sql, s.values.unwrap_or_else(|| Values(Vec::new())))
}

pub async fn lock_otp<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    id: Uuid,
) -> Result<Option<otp_session::Model>, DbErr> {
    let q =
        otp_session::Entity::find_by_id(id).filter(otp_session::Column::MerchantId.eq(merchant_id));
    for_update(c, q).one(c).await
}

/// Counts one wrong code against a session the caller holds locked (`lock_otp`); the
/// session locks at `limit`. Returns the attempts so far, or `None` when it was no longer
/// active.
pub async fn record_wrong_otp<C: ConnectionTrait>(
    c: &C,
    s: otp_session::Model,
    limit: i32,
) -> Result<Option<i32>, DbErr> {
    if s.status != OtpSessionStatus::Active {
        return Ok(None);
    }
    let attempts = s.failed_attempts + 1;
    let mut am = s.into_active_model();
    am.failed_attempts = Set(attempts);
    if attempts >= limit {
        am.status = Set(OtpSessionStatus::Locked);
    }
    am.update(c).await?;
    Ok(Some(attempts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unlocked_look_binds_the_values_of_its_call_on_both_backends() {
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            let t = Template::new();
            // Twice: the second call finds the template rendered by the first.
            for _ in 0..2 {
                let args = [Uuid::now_v7().into(), Uuid::now_v7().into()];
                let direct = otp_with_owner_phone(backend, &Args::Values(&args));
                let made = t
                    .statement(backend, 0, &args, |a| otp_with_owner_phone(backend, a))
                    .unwrap();
                assert_eq!((made.sql, made.values), (direct.0, Some(direct.1)));
            }
        }
    }
}
