//! Merchants' accounting policies (one row per merchant).
use entities::accounting_policy;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, sea_query::OnConflict};
use uuid::Uuid;

pub async fn find<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
) -> Result<Option<accounting_policy::Model>, DbErr> {
    accounting_policy::Entity::find_by_id(merchant_id)
        .one(c)
        .await
}

/// Writes the merchant's policy, replacing the one it had.
pub async fn put<C: ConnectionTrait>(c: &C, policy: accounting_policy::Model) -> Result<(), DbErr> {
    use accounting_policy::Column as Col;
    accounting_policy::Entity::insert(policy.into_active_model())
        .on_conflict(
            OnConflict::column(Col::MerchantId)
                .update_columns([
                    Col::DormancyDays,
                    Col::BreakageRateBp,
                    Col::BreakageMethod,
                    Col::UpdatedAt,
                    Col::UpdatedBy,
                ])
                .to_owned(),
        )
        .exec_without_returning(c)
        .await
        .map(|_| ())
}
