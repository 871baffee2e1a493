use sea_orm::entity::prelude::*;

/// A customer's identity at one merchant, keyed by (merchant, normalized phone).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "wallet_users")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub phone: String,
    pub state: WalletUserState,
    pub provider_customer_id: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub verified_at: Option<DateTimeUtc>,
}

states! {
    /// A customer identity: `PENDING_PROOF` until the phone is proven (`VERIFIED`);
    /// `EXPIRED` once its proof window lapsed (its money held in escrow).
    WalletUserState {
        PendingProof = "PENDING_PROOF",
        Verified = "VERIFIED",
        Expired = "EXPIRED",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
