use sea_orm::entity::prelude::*;

/// A partner's webhook endpoint: where events go, which ones, and the sealed secrets that
/// sign them.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_subscriptions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub integration_id: Uuid,
    pub merchant_id: Option<Uuid>,
    pub url: String,
    pub description: Option<String>,
    pub event_types: Option<Json>,
    pub secret_sealed: String,
    pub previous_secret_sealed: Option<String>,
    pub previous_secret_until: Option<DateTimeUtc>,
    pub state: SubscriptionState,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<DateTimeUtc>,
    pub failure_streak: i32,
    pub failing_since: Option<DateTimeUtc>,
    pub is_sandbox: bool,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

states! {
    /// An `ACTIVE` subscription receives deliveries; a `DISABLED` one (by its owner, an
    /// operator or auto-disable) keeps them `SUSPENDED` until enabled again.
    SubscriptionState {
        Active = "ACTIVE",
        Disabled = "DISABLED",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
