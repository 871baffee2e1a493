use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "qr_nonces")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub wallet_id: Uuid,
    pub nonce_hash: String,
    /// HMAC of the short code; the code itself is never stored.
    pub short_code_hash: Option<String>,
    pub expires_at: DateTimeUtc,
    pub superseded_at: Option<DateTimeUtc>,
    pub consumed_at: Option<DateTimeUtc>,
    pub payment_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
    /// The checkout session it was minted in: it pays only there.
    pub checkout_session_id: Option<Uuid>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
