use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "operators")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub name: String,
    pub key_prefix: String,
    /// bcrypt hash of the operator key; the key itself is never stored.
    pub key_hash: String,
    pub key_last_four: String,
    pub status: OperatorStatus,
    pub created_at: DateTimeUtc,
}

states! {
    /// An `active` operator's key signs in; an `inactive` (disabled) one's does not.
    OperatorStatus {
        Active = "active",
        Inactive = "inactive",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
