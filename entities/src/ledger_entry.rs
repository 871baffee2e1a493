use sea_orm::entity::prelude::*;

/// Append-only. Positive `amount_minor` raises the account's balance. `created_at` is the
/// tenant's clock (a sandbox's test clock) when the posting was made.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_entries")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub posting_id: Uuid,
    pub merchant_id: Uuid,
    pub account_kind: String,
    pub account_id: Uuid,
    /// The wallet the entry's posting is about (NULL only on a few entries from before
    /// migration 000023 whose posting moved no wallet-side account).
    pub wallet_id: Option<Uuid>,
    pub currency: String,
    pub amount_minor: i64,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
