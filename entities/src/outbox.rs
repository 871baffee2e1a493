use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub event_id: Uuid,
    /// event or job.
    pub kind: String,
    pub topic: String,
    pub merchant_id: Option<Uuid>,
    pub resource_type: String,
    pub resource_id: String,
    pub sequence_number: i64,
    pub payload: Json,
    pub occurred_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    pub relayed_at: Option<DateTimeUtc>,
    /// The request that wrote the row, and the trace it continues (migration 000019).
    pub request_id: Option<String>,
    pub traceparent: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
