use sea_orm::entity::prelude::*;

/// One interaction at a till: identity and basket attach to it, a payment completes it.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "checkout_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub brand_id: Option<Uuid>,
    pub branch_id: Option<Uuid>,
    pub terminal_id: Option<String>,
    pub cashier_id: Option<String>,
    pub partner_session_id: Option<String>,
    /// OPEN, IDENTIFIED, COMPLETED, CANCELLED or EXPIRED.
    pub state: String,
    pub wallet_user_id: Option<Uuid>,
    pub wallet_id: Option<Uuid>,
    pub wallet_program_id: Option<Uuid>,
    pub resolution_state: Option<String>,
    pub basket: Option<Json>,
    pub payment_id: Option<Uuid>,
    pub close_reason: Option<String>,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub closed_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
