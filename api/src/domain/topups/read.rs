//! What partners read of a top-up and of its credit taken back: the domain's read models, so
//! the HTTP edge names no table. It names nothing else of `topups`, so the feed and
//! disputes may read top-ups without a circle.
use chrono::{DateTime, Utc};
use entities::{topup, topup::TopupStatus, topup_reversal};
use uuid::Uuid;

/// A top-up's status as the feed reports it: `completed` once credited; a top-up requested
/// against a settlement still PENDING is `pending`, and `failed` if that settlement failed
/// (neither is in the list: no money moved); `reversed` once its credit was taken back (a
/// chargeback, or detached from a customer).
fn feed_status(t: &topup::Model) -> &'static str {
    match t.status {
        TopupStatus::Pending => "pending",
        TopupStatus::Failed => "failed",
        TopupStatus::Reversed => "reversed",
        TopupStatus::Credited => "completed",
    }
}

/// A credited top-up as partners read it.
#[derive(Clone, Debug)]
pub struct Topup {
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub integration_id: Uuid,
    /// `sku` or `settlement`.
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
    pub bonus_config_version: Option<i32>,
    pub currency: String,
    pub branch_id: Option<Uuid>,
    pub terminal_id: Option<String>,
    pub cashier_id: Option<String>,
    /// The feed's status: completed, pending, failed or reversed.
    pub feed_status: &'static str,
    pub created_at: DateTime<Utc>,
}

impl From<topup::Model> for Topup {
    fn from(t: topup::Model) -> Self {
        Topup {
            feed_status: feed_status(&t),
            id: t.id,
            merchant_id: t.merchant_id,
            integration_id: t.integration_id,
            kind: t.kind,
            order_ref: t.order_ref,
            sku_id: t.sku_id,
            sku_version: t.sku_version,
            quantity: t.quantity,
            wallet_id: t.wallet_id,
            wallet_user_id: t.wallet_user_id,
            credited_actual_minor: t.credited_actual_minor,
            bonus_minor: t.bonus_minor,
            bonus_grant_id: t.bonus_grant_id,
            bonus_config_version: t.bonus_config_version,
            currency: t.currency,
            branch_id: t.branch_id,
            terminal_id: t.terminal_id,
            cashier_id: t.cashier_id,
            created_at: t.created_at,
        }
    }
}

/// A top-up's credit taken back from the wallet (a chargeback, or detached from a customer).
#[derive(Clone, Debug)]
pub struct TopupReversal {
    pub id: Uuid,
    pub topup_id: Uuid,
    /// `chargeback` or `unattach`.
    pub kind: String,
    pub wallet_id: Uuid,
    /// Actual money taken back from the wallet.
    pub taken_back_minor: i64,
    /// Credit the wallet had already spent: not taken back.
    pub unrecovered_minor: i64,
    /// The unspent rest of the top-up's bonus grant, clawed back with it.
    pub bonus_clawed_back_minor: i64,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl From<topup_reversal::Model> for TopupReversal {
    fn from(r: topup_reversal::Model) -> Self {
        TopupReversal {
            id: r.id,
            topup_id: r.topup_id,
            kind: r.kind,
            wallet_id: r.wallet_id,
            taken_back_minor: r.amount_minor,
            unrecovered_minor: r.unrecovered_minor,
            bonus_clawed_back_minor: r.bonus_clawed_back_minor,
            reason: r.reason,
            created_at: r.created_at,
        }
    }
}
