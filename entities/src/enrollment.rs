use sea_orm::entity::prelude::*;

/// One pending-proof window of a wallet identity: the SMS code and link it sent, the
/// deadline, and what binds to the identity once phone proof completes.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "enrollments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub wallet_user_id: Uuid,
    pub wallet_program_id: Uuid,
    pub integration_id: Option<Uuid>,
    pub is_sandbox: bool,
    pub status: EnrollmentStatus,
    /// initiate, credit or operator.
    pub origin: String,
    pub language: Option<String>,
    pub provider_customer_id: Option<String>,
    pub card_fingerprint_hash: Option<String>,
    pub service_session_id: Option<Uuid>,
    pub code_hash: Option<String>,
    pub code_expires_at: Option<DateTimeUtc>,
    pub code_failed_attempts: i32,
    pub sends: i32,
    pub last_sent_at: Option<DateTimeUtc>,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub verified_at: Option<DateTimeUtc>,
    pub expired_at: Option<DateTimeUtc>,
    /// The terminal (`context.terminal_id`) that last sent the code: a code keyed there
    /// alone finds this enrollment.
    pub terminal_id: Option<String>,
}

states! {
    /// `pending` while its proof window is open; `verified` once the phone was proven;
    /// `expired` once the window lapsed.
    EnrollmentStatus {
        Pending = "pending",
        Verified = "verified",
        Expired = "expired",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
