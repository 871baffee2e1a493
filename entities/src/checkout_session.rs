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
    pub state: CheckoutState,
    pub wallet_user_id: Option<Uuid>,
    pub wallet_id: Option<Uuid>,
    pub wallet_program_id: Option<Uuid>,
    pub resolution_state: Option<SessionResolution>,
    pub basket: Option<Json>,
    pub payment_id: Option<Uuid>,
    pub close_reason: Option<String>,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub closed_at: Option<DateTimeUtc>,
}

states! {
    /// How the session's customer resolved when it was identified (the contract's
    /// `resolution_state`).
    SessionResolution {
        Registered = "registered",
        PendingProof = "pending_proof",
        NotFound = "not_found",
    }
}

states! {
    /// A session opens `OPEN`, becomes `IDENTIFIED` once a customer is named, and closes
    /// once: `COMPLETED` by its payment, `CANCELLED` by the terminal, or `EXPIRED`.
    CheckoutState {
        Open = "OPEN",
        Identified = "IDENTIFIED",
        Completed = "COMPLETED",
        Cancelled = "CANCELLED",
        Expired = "EXPIRED",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
