//! Top-ups from SKU sales at the POS: the SKU registry (what a unit credits and its bonus)
//! and the credit itself. A SKU change bumps its version and applies to later sales only:
//! every top-up keeps the terms it was credited with.
//!
//! One POS order credits once: the top-up claims (merchant, pos_order_ref) with a row in
//! its own transaction before anything else, so concurrent reports of the order queue on
//! that claim and the later ones return the first one's result.
mod credit;
mod read;
pub mod settlements;
mod sku_topup;
pub mod topup_reversals;

pub(crate) use credit::*;
pub use read::{Topup, TopupReversal};
pub use sku_topup::*;

use chrono::{DateTime, Utc};
use entities::sku;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::ledger::money;
use crate::{error::ApiError, store};

/// Lifetime of a bonus when the SKU names none.
pub const DEFAULT_BONUS_DAYS: i32 = 365;

/// A SKU's bonus per sale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bonus {
    /// A fixed amount per unit sold.
    PerUnit(i64),
    /// Basis points of the credit (rounded down).
    PercentBps(i32),
}

impl Bonus {
    /// The bonus on a sale of `quantity` units crediting `credit`; None when it would
    /// exceed the largest amount (the sale is refused).
    pub fn amount(self, quantity: i64, credit: i64) -> Option<i64> {
        match self {
            Bonus::PerUnit(m) => money::times(m, quantity),
            Bonus::PercentBps(bps) => money::basis_points(credit, bps),
        }
    }
}

pub fn bonus_of(s: &sku::Model) -> Option<Bonus> {
    match (s.bonus_minor, s.bonus_percent_bps) {
        (Some(m), _) if m > 0 => Some(Bonus::PerUnit(m)),
        (_, Some(b)) if b > 0 => Some(Bonus::PercentBps(b)),
        _ => None,
    }
}

/// A registered SKU with its current terms: the domain's read model, so the HTTP edge
/// names no table.
#[derive(Clone, Debug)]
pub struct Sku {
    pub id: Uuid,
    pub merchant_id: Uuid,
    /// The merchant's SKU code.
    pub sku_id: String,
    pub name: String,
    pub currency: String,
    /// What one unit credits to the wallet's actual money.
    pub wallet_credits_minor: i64,
    /// Its bonus per sale, if any.
    pub bonus: Option<Bonus>,
    /// Lifetime of the bonus grant in days, as registered (None: `DEFAULT_BONUS_DAYS`).
    pub bonus_expiry_days: Option<i32>,
    pub active: bool,
    /// Counts changes; a top-up reports the version it was credited with.
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<sku::Model> for Sku {
    fn from(s: sku::Model) -> Self {
        Sku {
            id: s.id,
            merchant_id: s.merchant_id,
            bonus: bonus_of(&s),
            sku_id: s.sku_id,
            name: s.name,
            currency: s.currency,
            wallet_credits_minor: s.wallet_credits_minor,
            bonus_expiry_days: s.bonus_expiry_days,
            active: s.active,
            version: s.version,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SkuTerms {
    pub sku_id: String,
    pub name: String,
    pub currency: String,
    pub wallet_credits_minor: i64,
    pub bonus: Option<Bonus>,
    pub bonus_expiry_days: Option<i32>,
    pub active: bool,
}

/// POST /skus: registers a SKU, or changes one (version + 1; past sales keep their terms).
/// Returns the SKU and whether it was new.
pub async fn register_sku<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Uuid,
    t: SkuTerms,
    now: DateTime<Utc>,
) -> Result<(Sku, bool), ApiError> {
    crate::domain::platform::currencies::require_currency(c, merchant, &t.currency).await?;
    let (bonus_minor, bonus_percent_bps) = match t.bonus {
        Some(Bonus::PerUnit(m)) => (Some(m), None),
        Some(Bonus::PercentBps(b)) => (None, Some(b)),
        None => (None, None),
    };
    let fresh = sku::Model {
        id: Uuid::now_v7(),
        merchant_id: merchant,
        integration_id,
        sku_id: t.sku_id.clone(),
        name: t.name.clone(),
        currency: t.currency.clone(),
        wallet_credits_minor: t.wallet_credits_minor,
        bonus_minor,
        bonus_percent_bps,
        bonus_expiry_days: t.bonus_expiry_days,
        active: t.active,
        version: 1,
        created_at: now,
        updated_at: now,
    };
    if store::topups::insert_sku_if_absent(c, fresh.clone()).await? {
        return Ok((fresh.into(), true));
    }
    let mut s = store::topups::lock_sku(c, merchant, &t.sku_id)
        .await?
        .ok_or_else(|| ApiError::not_found("SKU"))?;
    let unchanged = s.name == t.name
        && s.currency == t.currency
        && s.wallet_credits_minor == t.wallet_credits_minor
        && s.bonus_minor == bonus_minor
        && s.bonus_percent_bps == bonus_percent_bps
        && s.bonus_expiry_days == t.bonus_expiry_days
        && s.active == t.active;
    if unchanged {
        return Ok((s.into(), false));
    }
    s.name = t.name;
    s.currency = t.currency;
    s.wallet_credits_minor = t.wallet_credits_minor;
    s.bonus_minor = bonus_minor;
    s.bonus_percent_bps = bonus_percent_bps;
    s.bonus_expiry_days = t.bonus_expiry_days;
    s.active = t.active;
    s.version += 1;
    s.updated_at = now;
    Ok((store::topups::update_sku(c, s).await?.into(), false))
}

/// A page of the merchant's SKUs, oldest first.
pub async fn list_skus<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    after: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<Sku>, bool), ApiError> {
    let rows = store::topups::skus_page(c, merchant, after, limit + 1).await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    Ok((rows.into_iter().map(Sku::from).collect(), more))
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn order_reused() -> ApiError {
    ApiError::field(
        "/pos_order_ref",
        "already_used",
        "was already reported for a different sale (another SKU, quantity or customer)",
    )
}

pub use entities::topup::TopupStatus;
/// A top-up's status: credited (SKU top-ups always are).
pub const CREDITED: TopupStatus = TopupStatus::Credited;
/// Requested against a settlement still PENDING: shown in `pending_topups_minor`.
pub const PENDING: TopupStatus = TopupStatus::Pending;
/// Its settlement FAILED: nothing was credited.
pub const FAILED: TopupStatus = TopupStatus::Failed;
/// Credited, then taken back (a chargeback, or detached from a customer): see
/// `topup_reversals`.
pub const REVERSED: TopupStatus = TopupStatus::Reversed;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bonus_is_per_unit_or_basis_points_of_the_credit_rounded_down() {
        assert_eq!(Bonus::PerUnit(150).amount(3, 3_000), Some(450));
        assert_eq!(Bonus::PercentBps(1_000).amount(2, 2_000), Some(200));
        assert_eq!(Bonus::PercentBps(333).amount(1, 1_000), Some(33));
        assert_eq!(Bonus::PercentBps(1).amount(1, 99), Some(0));
        // Issue 25: a per-unit bonus of 10^12 on a million units is 10^18; refused.
        assert_eq!(
            Bonus::PerUnit(money::MAX_AMOUNT_MINOR).amount(1_000_000, 1_000_000),
            None
        );
        assert_eq!(
            Bonus::PercentBps(100_000).amount(1, money::MAX_AMOUNT_MINOR),
            None
        );
    }

    proptest::proptest! {
        /// Issue 25, point 3: whatever a SKU says and however many units sell, a sale's
        /// credit and bonus are each the exact figure within the largest amount, or the
        /// sale is refused; never a wrapped or negative number.
        #[test]
        fn a_sales_credit_and_bonus_are_exact_and_bounded_or_refused(
            unit in 1..=money::MAX_AMOUNT_MINOR,
            per_unit in 1..=money::MAX_AMOUNT_MINOR,
            bps in 1..=100_000i32,
            quantity in proptest::prelude::any::<i64>(),
        ) {
            let max = i128::from(money::MAX_AMOUNT_MINOR);
            let credit = money::times(unit, quantity);
            let exact = i128::from(unit) * i128::from(quantity);
            match credit {
                Some(c) => proptest::prop_assert_eq!(i128::from(c), exact),
                None => proptest::prop_assert!(exact < 0 || exact > max),
            }
            if let Some(c) = credit {
                for bonus in [Bonus::PerUnit(per_unit), Bonus::PercentBps(bps)] {
                    let exact = match bonus {
                        Bonus::PerUnit(m) => i128::from(m) * i128::from(quantity),
                        Bonus::PercentBps(b) => i128::from(c) * i128::from(b) / 10_000,
                    };
                    match bonus.amount(quantity, c) {
                        Some(v) => proptest::prop_assert_eq!(i128::from(v), exact),
                        None => proptest::prop_assert!(exact < 0 || exact > max),
                    }
                }
            }
        }
    }
}
