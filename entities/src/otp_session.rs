use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "otp_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub wallet_id: Uuid,
    pub order_ref: String,
    pub amount_minor: i64,
    pub currency: String,
    pub code_hash: String,
    pub failed_attempts: i32,
    pub status: OtpSessionStatus,
    pub payment_id: Option<Uuid>,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    pub consumed_at: Option<DateTimeUtc>,
}

states! {
    /// `active` until a payment takes it (`consumed`) or too many wrong codes lock it
    /// (`locked`).
    OtpSessionStatus {
        Active = "active",
        Consumed = "consumed",
        Locked = "locked",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
