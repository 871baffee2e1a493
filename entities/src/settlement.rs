use sea_orm::entity::prelude::*;

/// A provider settlement reported on the control plane: PENDING, SETTLED or FAILED. A
/// confirmed top-up uses a SETTLED one once (`topup_id`).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "settlements")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub state: SettlementState,
    pub provider: Option<String>,
    pub failure_reason: Option<String>,
    pub is_sandbox: bool,
    pub topup_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

states! {
    /// A settlement reference: `PENDING` while the provider settles, then `SETTLED` or
    /// `FAILED` (and never moves again).
    SettlementState {
        Pending = "PENDING",
        Settled = "SETTLED",
        Failed = "FAILED",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
