use sea_orm::entity::prelude::*;

/// A refund or a void of a payment: what went back where.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "payment_refunds")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub payment_id: Uuid,
    /// The payment's integration (the transactions feed reads a page by it).
    pub integration_id: Uuid,
    pub merchant_id: Uuid,
    /// refund or void.
    pub kind: String,
    pub amount_minor: i64,
    pub to_actual_minor: i64,
    /// `[[grant_id, amount], ...]`.
    pub to_grants: Json,
    pub forfeited_promo_minor: i64,
    pub reason: Option<String>,
    pub posting_id: Uuid,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::payment::Entity",
        from = "Column::PaymentId",
        to = "super::payment::Column::Id"
    )]
    Payment,
}

impl Related<super::payment::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Payment.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
