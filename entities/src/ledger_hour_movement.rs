use sea_orm::entity::prelude::*;

/// What one posting kind moved on one value-class account kind of a merchant, in one
/// currency, in one UTC hour (a snapshot row: rebuilt from the ledger alone).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_hour_movements")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub merchant_id: Uuid,
    /// The hour's first instant.
    #[sea_orm(primary_key, auto_increment = false)]
    pub hour: DateTimeUtc,
    #[sea_orm(primary_key, auto_increment = false)]
    pub currency: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub account_kind: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub posting_kind: String,
    pub amount_minor: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
