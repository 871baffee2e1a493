use sea_orm::entity::prelude::*;

/// An offer armed for one customer: ARMED until a payment redeems it (REDEEMED), it runs
/// out (EXPIRED) or the partner withdraws it (CANCELLED).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "offers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    pub wallet_user_id: Uuid,
    pub wallet_program_id: Uuid,
    pub name: String,
    pub currency: String,
    pub reward_minor: Option<i64>,
    pub reward_bps: Option<i32>,
    pub max_reward_minor: Option<i64>,
    pub min_amount_minor: i64,
    pub grant_expiry_days: i32,
    pub budget_id: Option<Uuid>,
    pub state: OfferState,
    pub expires_at: DateTimeUtc,
    pub payment_id: Option<Uuid>,
    pub grant_id: Option<Uuid>,
    pub rewarded_minor: Option<i64>,
    pub redeemed_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

states! {
    /// An offer is `ARMED` until its payment redeems it (`REDEEMED`), the merchant cancels
    /// it (`CANCELLED`) or it lapses (`EXPIRED`).
    OfferState {
        Armed = "ARMED",
        Redeemed = "REDEEMED",
        Expired = "EXPIRED",
        Cancelled = "CANCELLED",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
