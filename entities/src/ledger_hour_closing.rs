use sea_orm::entity::prelude::*;

/// A merchant's customer value in one currency at the end of a UTC hour in which something
/// moved, by class, and how many wallets held any liability (a snapshot row: rebuilt from
/// the ledger alone).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_hour_closings")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub merchant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub currency: String,
    /// The hour's first instant.
    #[sea_orm(primary_key, auto_increment = false)]
    pub hour: DateTimeUtc,
    pub actual_minor: i64,
    pub promo_released_minor: i64,
    pub promo_locked_minor: i64,
    pub escrow_minor: i64,
    pub pending_topup_minor: i64,
    pub wallets_holding: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
