use sea_orm::entity::prelude::*;

/// One version of a program's reload-bonus tiers. Versions are never changed; the newest
/// is in force.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "reload_bonus_configs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub wallet_program_id: Uuid,
    pub version: i32,
    pub currency: String,
    pub tiers: Json,
    pub expiry_days: Option<i32>,
    pub budget_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
