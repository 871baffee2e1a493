use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "payments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub branch_id: Option<Uuid>,
    pub terminal_id: Option<String>,
    pub cashier_id: Option<String>,
    pub wallet_id: Uuid,
    pub status: PaymentStatus,
    pub credential_type: String,
    pub amount_minor: i64,
    pub currency: String,
    pub debited_promo_minor: i64,
    pub debited_actual_minor: i64,
    /// `[[grant_id, amount], ...]` in the order spent.
    pub promo_split: Json,
    pub refunded_minor: i64,
    pub order_ref: Option<String>,
    pub basket: Option<Json>,
    pub basket_total_minor: Option<i64>,
    pub needs_reconciliation: bool,
    pub data_completeness_score: i32,
    pub posting_id: Uuid,
    pub created_at: DateTimeUtc,
    pub completed_at: DateTimeUtc,
    pub voided_at: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
    /// The checkout session the payment ran in, if any.
    pub service_session_id: Option<Uuid>,
}

states! {
    /// A payment's status: `completed` when it took the money, `voided` once reversed in
    /// full. Partial refunds leave it `completed` (`refunded_minor` says how much went back).
    PaymentStatus {
        Completed = "completed",
        Voided = "voided",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
