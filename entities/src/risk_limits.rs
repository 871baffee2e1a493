use sea_orm::entity::prelude::*;

/// The velocity limits a merchant set, for its sandbox or its live payments. A column left
/// null is no limit.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "risk_limits")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub merchant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub is_sandbox: bool,
    pub wallet_payments_24h_count: Option<i64>,
    pub wallet_payments_24h_minor: Option<i64>,
    pub wallet_payments_7d_count: Option<i64>,
    pub wallet_payments_7d_minor: Option<i64>,
    pub terminal_payments_1h_minor: Option<i64>,
    pub payment_max_minor: Option<i64>,
    pub wallet_topups_24h_minor: Option<i64>,
    pub updated_at: DateTimeUtc,
    pub updated_by: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
