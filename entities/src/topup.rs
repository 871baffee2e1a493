use sea_orm::entity::prelude::*;

/// One credit of actual money to a wallet from a sale at the POS (a SKU) or a settled
/// payment (a settlement reference), with the bonus it accrued.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "topups")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    /// sku or settlement.
    pub kind: String,
    pub order_ref: String,
    pub sku_id: Option<String>,
    pub sku_version: Option<i32>,
    pub quantity: Option<i64>,
    pub wallet_id: Uuid,
    pub wallet_user_id: Uuid,
    pub credited_actual_minor: i64,
    pub bonus_minor: i64,
    pub bonus_grant_id: Option<Uuid>,
    pub currency: String,
    pub fingerprint: String,
    pub result: Json,
    pub branch_id: Option<Uuid>,
    pub terminal_id: Option<String>,
    pub cashier_id: Option<String>,
    pub service_session_id: Option<Uuid>,
    pub posting_id: Uuid,
    pub created_at: DateTimeUtc,
    /// The reload-bonus config version a settlement top-up accrued under.
    pub bonus_config_version: Option<i32>,
    pub status: TopupStatus,
}

states! {
    /// `credited`; or, for a settlement top-up requested before its payment settled,
    /// `pending` until the settlement's outcome makes it `credited` or `failed`; `reversed`
    /// once its credit was taken back (a chargeback, or detached from a customer).
    TopupStatus {
        Credited = "credited",
        Pending = "pending",
        Failed = "failed",
        Reversed = "reversed",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
