use sea_orm::entity::prelude::*;

/// One version of a program's cashback rule. Versions are never changed; the newest is in
/// force.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "cashback_rules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub wallet_program_id: Uuid,
    pub version: i32,
    pub currency: String,
    pub rate_bps: i32,
    pub min_payment_minor: i64,
    pub max_cashback_minor: Option<i64>,
    pub expiry_days: i32,
    pub active: bool,
    pub budget_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
