use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "resource_sequences")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub resource_type: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub resource_id: String,
    pub last_value: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
