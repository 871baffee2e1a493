use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "dead_letters")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    #[sea_orm(unique)]
    pub job_id: Uuid,
    pub queue: String,
    pub job_type: String,
    pub merchant_id: Option<Uuid>,
    pub payload: Json,
    pub attempts: i32,
    pub error_history: Json,
    pub last_error: String,
    pub status: DeadLetterStatus,
    pub first_enqueued_at: DateTimeUtc,
    pub dead_at: DateTimeUtc,
    pub replay_count: i32,
    pub replayed_at: Option<DateTimeUtc>,
    pub purged_at: Option<DateTimeUtc>,
    pub purge_reason: Option<String>,
}

states! {
    /// `dead` until an operator replays it onto its queue (`replayed`) or purges it
    /// (`purged`).
    DeadLetterStatus {
        Dead = "dead",
        Replayed = "replayed",
        Purged = "purged",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
