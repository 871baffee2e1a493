use sea_orm::entity::prelude::*;

/// A dispute of a wallet payment or a credited top-up: opened with an amount and a reason,
/// resolved once. Opening moves no money; a resolution the customer wins does (a refund of
/// the payment, or taking back a top-up's credit), recorded here by the movement's id.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "disputes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    /// The payment or top-up disputed.
    pub transaction_id: Uuid,
    /// payment or topup.
    pub transaction_kind: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    pub status: DisputeStatus,
    /// What the customer got back when they won: the refund's amount (a payment) or the
    /// credit taken back (a top-up).
    pub recovered_minor: i64,
    /// A top-up's disputed credit the wallet no longer held when the customer won.
    pub unrecovered_minor: i64,
    /// The refund (payment) or top-up reversal the resolution made.
    pub movement_id: Option<Uuid>,
    pub resolution_note: Option<String>,
    /// The key that opened it.
    pub opened_by_key_id: Option<Uuid>,
    pub resolved_by_key_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
    pub resolved_at: Option<DateTimeUtc>,
}

states! {
    /// `open` until resolved for the merchant (`merchant_won`) or the customer
    /// (`customer_won`).
    DisputeStatus {
        Open = "open",
        MerchantWon = "merchant_won",
        CustomerWon = "customer_won",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
