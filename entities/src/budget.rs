use sea_orm::entity::prelude::*;

/// A campaign budget envelope: the promotional credit its accruals may issue in total.
/// `version` changes with every update and is the compare-and-swap token.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "budgets")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub name: String,
    pub currency: String,
    pub limit_minor: i64,
    pub spent_minor: i64,
    pub active: bool,
    pub version: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
