use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "wallet_programs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub enterprise_id: Uuid,
    pub name: String,
    pub currency: String,
    pub status: WalletProgramStatus,
    pub created_at: DateTimeUtc,
}

states! {
    /// Only an `ACTIVE` program takes new wallets and payments.
    WalletProgramStatus {
        Active = "ACTIVE",
        Inactive = "INACTIVE",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
