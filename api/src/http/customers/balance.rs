//! The wallet balance as every response shows it (payments, top-ups, enrollment, customer
//! reads, operator tools): one shape, one conversion from the domain's `Balance`.
use poem_openapi::Object;
use serde::{Deserialize, Serialize};

use crate::domain::customers::wallets::{Balance, GrantBalance};

/// A promotional grant inside a balance.
#[derive(Object, Serialize, Deserialize)]
pub struct PromoGrant {
    pub grant_id: String,
    /// CASHBACK, RELOAD_BONUS or SKU_TOPUP_BONUS.
    pub source: String,
    /// RELEASED or LOCKED (EXPIRED once past `expires_at`).
    pub state: String,
    pub remaining_minor: i64,
    pub expires_at: String,
}

/// A wallet balance: actual money and promotional credit, in minor units.
#[derive(Object, Serialize, Deserialize)]
pub struct BalanceView {
    pub actual_minor: i64,
    /// Released, unexpired promotional credit: it pays before actual money.
    pub promo_available_minor: i64,
    /// Promotional credit held until the customer verifies; it never pays.
    pub promo_locked_minor: i64,
    pub pending_topups_minor: i64,
    pub currency: String,
    pub promo_grants: Vec<PromoGrant>,
}

impl From<Balance> for BalanceView {
    fn from(b: Balance) -> Self {
        BalanceView {
            actual_minor: b.actual_minor,
            promo_available_minor: b.promo_available_minor,
            promo_locked_minor: b.promo_locked_minor,
            pending_topups_minor: b.pending_topups_minor,
            currency: b.currency,
            promo_grants: b
                .promo_grants
                .into_iter()
                .map(|g: GrantBalance| PromoGrant {
                    grant_id: g.grant_id,
                    source: g.source,
                    state: g.state,
                    remaining_minor: g.remaining_minor,
                    expires_at: g.expires_at,
                })
                .collect(),
        }
    }
}
