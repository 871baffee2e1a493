use sea_orm::entity::prelude::*;

/// One terminal's payments of the last hour, by minute: the row a payment locks to check
/// the terminal's hourly limit.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "risk_terminal_usage")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub merchant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub is_sandbox: bool,
    #[sea_orm(primary_key, auto_increment = false)]
    pub terminal: String,
    /// `{"<unix minute>": minor, ...}`.
    pub minutes: String,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
