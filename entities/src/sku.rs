use sea_orm::entity::prelude::*;

/// A partner's top-up SKU: what one unit credits, and its bonus. `version` counts changes.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "skus")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub sku_id: String,
    pub name: String,
    pub currency: String,
    pub wallet_credits_minor: i64,
    pub bonus_minor: Option<i64>,
    pub bonus_percent_bps: Option<i32>,
    pub bonus_expiry_days: Option<i32>,
    pub active: bool,
    pub version: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
