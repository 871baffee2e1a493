use sea_orm::entity::prelude::*;

/// A terminal, branch, merchant or wallet that crossed a risk threshold, with its latest
/// crossing (`domain::risk`).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "risk_blocks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub is_sandbox: bool,
    /// `terminal`, `branch`, `merchant` or `wallet`.
    pub scope: String,
    pub subject: String,
    pub rule: String,
    pub threshold: i64,
    pub window_secs: i64,
    pub observed: i64,
    pub crossed_at: DateTimeUtc,
    pub until: DateTimeUtc,
    pub last_seen_at: DateTimeUtc,
    pub crossings: i64,
    pub cleared_at: Option<DateTimeUtc>,
    pub cleared_by: Option<String>,
    pub clear_reason: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
