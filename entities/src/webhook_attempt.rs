use sea_orm::entity::prelude::*;

/// One HTTP attempt of a delivery.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub delivery_id: Uuid,
    pub subscription_id: Uuid,
    pub attempt: i32,
    pub started_at: DateTimeUtc,
    pub status_code: Option<i32>,
    pub latency_ms: i64,
    pub error: Option<String>,
    pub succeeded: bool,
    pub next_retry_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
