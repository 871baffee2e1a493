use sea_orm::entity::prelude::*;

/// `remaining_minor` always equals the sum of the grant's `promo_grant` ledger entries.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "promo_grants")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub wallet_id: Uuid,
    pub merchant_id: Uuid,
    pub source: String,
    pub state: PromoGrantState,
    pub currency: String,
    pub original_minor: i64,
    pub remaining_minor: i64,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

states! {
    /// A promotional grant: `LOCKED` until its customer is verified, then `RELEASED`
    /// (spendable); `CONSUMED` at zero (a refund into it releases it again); ended as
    /// `EXPIRED` or `CLAWED_BACK`.
    PromoGrantState {
        Locked = "LOCKED",
        Released = "RELEASED",
        Consumed = "CONSUMED",
        Expired = "EXPIRED",
        ClawedBack = "CLAWED_BACK",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
