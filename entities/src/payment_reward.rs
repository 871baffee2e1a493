use sea_orm::entity::prelude::*;

/// A reward one payment earned (cashback, or an offer redeemed against it) and how much
/// refunds and voids took back of it.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "payment_rewards")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub payment_id: Uuid,
    /// cashback or offer.
    pub kind: String,
    pub source_id: Uuid,
    pub merchant_id: Uuid,
    pub grant_id: Uuid,
    pub budget_id: Option<Uuid>,
    pub amount_minor: i64,
    pub base_minor: i64,
    pub base_refunded_minor: i64,
    pub reversed_minor: i64,
    pub unrecovered_minor: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
