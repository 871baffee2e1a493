use sea_orm::entity::prelude::*;

/// Up to which instant (an hour's start) a merchant's snapshot rows are complete.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_snapshot_marks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub merchant_id: Uuid,
    pub built_until: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
