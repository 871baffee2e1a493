use sea_orm::entity::prelude::*;

/// A merchant's accounting policy for its stored value: dormancy and expected breakage.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "accounting_policies")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub merchant_id: Uuid,
    pub dormancy_days: i32,
    pub breakage_rate_bp: i32,
    /// `proportional` or `remote`.
    pub breakage_method: String,
    pub updated_at: DateTimeUtc,
    pub updated_by: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
