//! Reload-bonus tiers: the bonus a confirmed top-up earns by its amount. Each POST is a new
//! version of the program's config; a top-up accrues under the version in force when it
//! was confirmed and records it, so a later change never alters an earlier bonus.
use chrono::{DateTime, Utc};
use entities::reload_bonus_config;
use sea_orm::ConnectionTrait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{customers::wallets, topups::Bonus, validate::Errors};
use crate::{error::ApiError, store};

/// A bonus grant's lifetime when the config names none.
pub const DEFAULT_EXPIRY_DAYS: i32 = 365;

/// One band: top-ups of `min_amount_minor` up to `max_amount_minor` (both inclusive; no
/// maximum means no upper end) earn a fixed bonus or basis points of the amount.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tier {
    pub min_amount_minor: i64,
    pub max_amount_minor: Option<i64>,
    pub bonus_minor: Option<i64>,
    pub bonus_percent_bps: Option<i32>,
}

impl Tier {
    fn upper(&self) -> i64 {
        self.max_amount_minor.unwrap_or(i64::MAX)
    }

    pub fn contains(&self, amount: i64) -> bool {
        amount >= self.min_amount_minor && amount <= self.upper()
    }

    pub fn bonus(&self) -> Option<Bonus> {
        match (self.bonus_minor, self.bonus_percent_bps) {
            (Some(m), _) => Some(Bonus::PerUnit(m)),
            (_, Some(b)) => Some(Bonus::PercentBps(b)),
            _ => None,
        }
    }

    fn band(&self) -> String {
        match self.max_amount_minor {
            Some(max) => format!("{}–{}", self.min_amount_minor, max),
            None => format!("{} and above", self.min_amount_minor),
        }
    }
}

/// Every pair of tiers whose bands overlap, named by their positions in the request.
pub fn check_tiers(e: &mut Errors, tiers: &[Tier]) {
    let mut order: Vec<usize> = (0..tiers.len()).collect();
    order.sort_by_key(|&i| (tiers[i].min_amount_minor, tiers[i].upper()));
    for pair in order.windows(2) {
        let (a, b) = (&tiers[pair[0]], &tiers[pair[1]]);
        if b.min_amount_minor <= a.upper() {
            e.push(
                format!("/tiers/{}", pair[1]),
                "overlap",
                format!(
                    "band {} overlaps /tiers/{} (band {})",
                    b.band(),
                    pair[0],
                    a.band()
                ),
            );
        }
    }
}

/// The tier a top-up of `amount` falls in, if any.
pub fn tier_for(tiers: &[Tier], amount: i64) -> Option<&Tier> {
    tiers.iter().find(|t| t.contains(amount))
}

pub struct NewConfig {
    pub wallet_program_id: Uuid,
    pub currency: String,
    pub tiers: Vec<Tier>,
    pub expiry_days: Option<i32>,
    pub budget_id: Option<Uuid>,
}

pub fn tiers_of(c: &reload_bonus_config::Model) -> Vec<Tier> {
    serde_json::from_value(c.tiers.clone()).unwrap_or_default()
}

/// A version of a program's reload-bonus config: the domain's read model, so the HTTP edge
/// names no table.
#[derive(Clone, Debug)]
pub struct Config {
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub wallet_program_id: Uuid,
    /// Counts changes; a confirmed top-up reports the version it accrued under.
    pub version: i32,
    pub currency: String,
    /// Its bands, as stored.
    pub tiers: Vec<Tier>,
    /// Lifetime of a bonus grant in days; None: `DEFAULT_EXPIRY_DAYS`.
    pub expiry_days: Option<i32>,
    pub budget_id: Option<Uuid>,
    /// When this version came into force.
    pub created_at: DateTime<Utc>,
}

impl From<reload_bonus_config::Model> for Config {
    fn from(c: reload_bonus_config::Model) -> Self {
        Config {
            tiers: tiers_of(&c),
            id: c.id,
            merchant_id: c.merchant_id,
            wallet_program_id: c.wallet_program_id,
            version: c.version,
            currency: c.currency,
            expiry_days: c.expiry_days,
            budget_id: c.budget_id,
            created_at: c.created_at,
        }
    }
}

/// POST /topup/reload-bonus/config: stores the next version of the program's tiers. The
/// program must be the merchant's and run in `currency`.
pub async fn configure<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Uuid,
    cfg: NewConfig,
    now: DateTime<Utc>,
) -> Result<Config, ApiError> {
    let program = wallets::program_for(c, merchant, Some(cfg.wallet_program_id)).await?;
    if program.currency != cfg.currency {
        return Err(ApiError::currency_not_supported(std::slice::from_ref(
            &program.currency,
        )));
    }
    if let Some(b) = cfg.budget_id {
        let budget = crate::domain::incentives::budgets::get(c, merchant, b).await?;
        if budget.currency != cfg.currency {
            return Err(ApiError::field(
                "/budget_id",
                "currency_mismatch",
                format!("is a budget in {}", budget.currency),
            ));
        }
    }
    // The program row's lock orders concurrent changes, so versions never collide.
    store::tenancy::lock_program(c, program.id).await?;
    let version = store::incentives::current_reload_config(c, program.id)
        .await?
        .map_or(1, |v| v.version + 1);
    Ok(store::incentives::insert_reload_config(
        c,
        reload_bonus_config::Model {
            id: Uuid::now_v7(),
            merchant_id: merchant,
            integration_id,
            wallet_program_id: program.id,
            version,
            currency: cfg.currency,
            tiers: serde_json::to_value(&cfg.tiers).map_err(ApiError::internal)?,
            expiry_days: cfg.expiry_days,
            budget_id: cfg.budget_id,
            created_at: now,
        },
    )
    .await?
    .into())
}

pub async fn current<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    program_id: Uuid,
) -> Result<Option<Config>, ApiError> {
    let program = wallets::program_for(c, merchant, Some(program_id)).await?;
    Ok(store::incentives::current_reload_config(c, program.id)
        .await?
        .map(Config::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(min: i64, max: Option<i64>) -> Tier {
        Tier {
            min_amount_minor: min,
            max_amount_minor: max,
            bonus_minor: Some(1),
            bonus_percent_bps: None,
        }
    }

    #[test]
    fn bands_that_share_an_amount_overlap_and_the_error_names_both() {
        let mut e = Errors::default();
        check_tiers(&mut e, &[tier(5_000, None), tier(1_000, Some(5_000))]);
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.0[0].field, "/tiers/0");
        assert!(e.0[0].message.contains("/tiers/1"), "{}", e.0[0].message);

        let mut e = Errors::default();
        check_tiers(
            &mut e,
            &[
                tier(1_000, Some(4_999)),
                tier(5_000, None),
                tier(1, Some(999)),
            ],
        );
        assert!(e.is_empty(), "adjacent bands do not overlap");

        let mut e = Errors::default();
        check_tiers(&mut e, &[tier(1, None), tier(10_000, Some(20_000))]);
        assert_eq!(
            e.0.len(),
            1,
            "an open-ended band covers everything above it"
        );
    }

    #[test]
    fn a_top_up_falls_in_the_band_that_contains_its_amount() {
        let tiers = [tier(1_000, Some(4_999)), tier(5_000, None)];
        assert_eq!(tier_for(&tiers, 999), None);
        assert_eq!(tier_for(&tiers, 1_000), Some(&tiers[0]));
        assert_eq!(tier_for(&tiers, 4_999), Some(&tiers[0]));
        assert_eq!(tier_for(&tiers, 1_000_000), Some(&tiers[1]));
    }
}
