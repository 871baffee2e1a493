use sea_orm::entity::prelude::*;

/// The cashback one payment earned and how much refunds and voids took back of it.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "cashback_accruals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub payment_id: Uuid,
    pub merchant_id: Uuid,
    pub grant_id: Uuid,
    pub rule_id: Uuid,
    pub budget_id: Option<Uuid>,
    pub amount_minor: i64,
    pub reversed_minor: i64,
    pub unrecovered_minor: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
