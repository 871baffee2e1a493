use sea_orm::entity::prelude::*;

/// One event for one subscription: PENDING until an attempt gets a 2xx (DELIVERED), the
/// retries run out (DEAD), or the endpoint is disabled (SUSPENDED).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub subscription_id: Uuid,
    pub integration_id: Uuid,
    pub merchant_id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub resource_key: String,
    pub sequence_number: i64,
    pub body: String,
    pub state: DeliveryState,
    pub attempts: i32,
    pub replays: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTimeUtc>,
    pub delivered_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// The request whose event this delivers, and the trace it continues (migration 000019).
    pub request_id: Option<String>,
    pub traceparent: Option<String>,
}

states! {
    /// `PENDING` until an attempt succeeds (`DELIVERED`) or the attempts run out (`DEAD`);
    /// `SUSPENDED` while its subscription is disabled.
    DeliveryState {
        Pending = "PENDING",
        Delivered = "DELIVERED",
        Dead = "DEAD",
        Suspended = "SUSPENDED",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::webhook_subscription::Entity",
        from = "Column::SubscriptionId",
        to = "super::webhook_subscription::Column::Id"
    )]
    Subscription,
}

impl Related<super::webhook_subscription::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Subscription.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
