use sea_orm::entity::prelude::*;

/// A top-up's credit taken back from the wallet it went to: a dispute the customer won (a
/// chargeback) or the top-up detached from the customer it was wrongly attached to. At most
/// one per top-up.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "topup_reversals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    #[sea_orm(unique)]
    pub topup_id: Uuid,
    /// The top-up's integration (the transactions feed reads a page by it).
    pub integration_id: Uuid,
    pub merchant_id: Uuid,
    pub wallet_id: Uuid,
    /// chargeback or unattach.
    pub kind: String,
    /// The actual money taken back from the wallet.
    pub amount_minor: i64,
    /// What was to be taken back but the wallet no longer held (spent already).
    pub unrecovered_minor: i64,
    /// The unspent part of the top-up's bonus grant clawed back with it.
    pub bonus_clawed_back_minor: i64,
    pub reason: Option<String>,
    /// None when nothing could be taken back (no posting of zero).
    pub posting_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::topup::Entity",
        from = "Column::TopupId",
        to = "super::topup::Column::Id"
    )]
    Topup,
}

impl Related<super::topup::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Topup.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
