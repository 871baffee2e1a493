use sea_orm::entity::prelude::*;

/// One wallet per identity and program. `actual_minor` always equals the sum of the
/// wallet's `wallet_actual` ledger entries.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "wallets")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub wallet_user_id: Uuid,
    pub merchant_id: Uuid,
    pub wallet_program_id: Uuid,
    pub currency: String,
    pub actual_minor: i64,
    pub pending_topups_minor: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::wallet_user::Entity",
        from = "Column::WalletUserId",
        to = "super::wallet_user::Column::Id"
    )]
    Owner,
}

impl Related<super::wallet_user::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Owner.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
