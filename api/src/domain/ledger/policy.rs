//! A merchant's accounting policy for its stored value (docs/accounting.md): the dormancy
//! period (days without a customer-initiated movement after which a wallet is dormant, for
//! unclaimed-property filings) and the expected breakage (a rate in basis points, and the
//! method that recognises it). Reports read it; nothing here touches the ledger.
use chrono::{DateTime, Utc};
use entities::accounting_policy;
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::credentials::Principal;
use crate::domain::validate::Errors;
use crate::error::ApiError;
use crate::store;

/// `proportional` (ASC 606 / IFRS 15: expected breakage recognised as customers redeem)
/// or `remote` (only once redemption is remote: a wallet past its dormancy period).
pub const METHODS: &[&str] = &["proportional", "remote"];
pub const PROPORTIONAL: &str = "proportional";
pub const REMOTE: &str = "remote";

/// Three years: the most common unclaimed-property dormancy period.
pub const DEFAULT_DORMANCY_DAYS: i32 = 1095;
pub const DORMANCY_DAYS: std::ops::RangeInclusive<i32> = 30..=3650;
/// Below 100%: at 100% nothing is ever redeemed, and the proportional rate is undefined.
pub const BREAKAGE_RATE_BP: std::ops::RangeInclusive<i32> = 0..=9_999;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub merchant_id: Uuid,
    pub dormancy_days: i32,
    pub breakage_rate_bp: i32,
    pub breakage_method: String,
    /// When it was last set; `None` for a merchant that never set one (the defaults).
    pub updated_at: Option<DateTime<Utc>>,
}

impl Policy {
    pub fn default_for(merchant_id: Uuid) -> Policy {
        Policy {
            merchant_id,
            dormancy_days: DEFAULT_DORMANCY_DAYS,
            breakage_rate_bp: 0,
            breakage_method: PROPORTIONAL.into(),
            updated_at: None,
        }
    }

    /// The breakage an amount `redeemed` of actual money implies under the proportional
    /// method: every unit redeemed recognises rate / (1 − rate) of a unit of expected
    /// breakage, rounded down to the minor unit (so the estimate never runs ahead).
    pub fn proportional_breakage(&self, redeemed: i64) -> i64 {
        let r = i128::from(self.breakage_rate_bp);
        if redeemed <= 0 || r <= 0 {
            return 0;
        }
        (i128::from(redeemed) * r / (10_000 - r)) as i64
    }
}

impl From<accounting_policy::Model> for Policy {
    fn from(m: accounting_policy::Model) -> Self {
        Policy {
            merchant_id: m.merchant_id,
            dormancy_days: m.dormancy_days,
            breakage_rate_bp: m.breakage_rate_bp,
            breakage_method: m.breakage_method,
            updated_at: Some(m.updated_at),
        }
    }
}

/// The merchant's policy, or the defaults.
pub async fn of<C: ConnectionTrait>(c: &C, merchant_id: Uuid) -> Result<Policy, ApiError> {
    Ok(store::ledger::policies::find(c, merchant_id)
        .await?
        .map(Policy::from)
        .unwrap_or_else(|| Policy::default_for(merchant_id)))
}

/// The policy of merchant `asked` (a merchant key's own when none is named), if the key may
/// read that merchant; NOT_FOUND otherwise.
pub async fn readable<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    asked: Option<Uuid>,
) -> Result<Policy, ApiError> {
    let merchant = match (asked, &p.scope) {
        (Some(m), _) => m,
        (None, crate::domain::credentials::Scope::Enterprise { enterprise_id }) => *enterprise_id,
        (None, _) => {
            return Err(ApiError::field(
                "query:merchant_id",
                "required",
                "is required with a platform key",
            ));
        }
    };
    let readable =
        crate::domain::ledger::liability::readable_merchants(c, p, Some(merchant)).await?;
    if readable.is_empty() {
        return Err(ApiError::not_found("Merchant"));
    }
    of(c, merchant).await
}

/// A policy as asked, before it is checked.
pub struct NewPolicy<'a> {
    pub dormancy_days: i64,
    pub breakage_rate_bp: i64,
    pub breakage_method: &'a str,
}

/// Checks a policy's values (field names are JSON pointers into the request body).
pub fn check(e: &mut Errors, p: &NewPolicy<'_>) {
    let days = i64::from(*DORMANCY_DAYS.start())..=i64::from(*DORMANCY_DAYS.end());
    if !days.contains(&p.dormancy_days) {
        e.push(
            "/dormancy_days",
            "out_of_range",
            format!(
                "must be between {} and {}",
                DORMANCY_DAYS.start(),
                DORMANCY_DAYS.end()
            ),
        );
    }
    if p.breakage_rate_bp < i64::from(*BREAKAGE_RATE_BP.start())
        || p.breakage_rate_bp > i64::from(*BREAKAGE_RATE_BP.end())
    {
        e.push(
            "/breakage_rate_bp",
            "out_of_range",
            "must be between 0 and 9999 (basis points)",
        );
    }
    if !METHODS.contains(&p.breakage_method) {
        e.push(
            "/breakage_method",
            "invalid",
            "must be proportional or remote",
        );
    }
}

/// Sets the merchant's policy (the caller may read the merchant), audited with the key.
pub async fn set<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    merchant_id: Uuid,
    new: &NewPolicy<'_>,
    now: DateTime<Utc>,
) -> Result<Policy, ApiError> {
    let readable =
        crate::domain::ledger::liability::readable_merchants(c, p, Some(merchant_id)).await?;
    if readable.is_empty() {
        return Err(ApiError::forbidden(
            "This key cannot set the policy of that merchant.",
        ));
    }
    let actor = p.actor();
    let model = accounting_policy::Model {
        merchant_id,
        dormancy_days: new.dormancy_days as i32,
        breakage_rate_bp: new.breakage_rate_bp as i32,
        breakage_method: new.breakage_method.to_string(),
        updated_at: now,
        updated_by: actor.clone(),
    };
    store::ledger::policies::put(c, model.clone()).await?;
    crate::domain::operators::audit(
        c,
        &actor,
        "accounting_policy.set",
        "merchant",
        Some(merchant_id.to_string()),
        None,
        json!({
            "dormancy_days": model.dormancy_days,
            "breakage_rate_bp": model.breakage_rate_bp,
            "breakage_method": model.breakage_method,
        }),
    )
    .await?;
    Ok(model.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportional_breakage_is_rate_over_one_minus_rate_of_what_was_redeemed_rounded_down() {
        let p = Policy {
            breakage_rate_bp: 1_000,
            ..Policy::default_for(Uuid::nil())
        };
        // 10% expected breakage: 900 redeemed of an expected 900 recognises the whole 100.
        assert_eq!(p.proportional_breakage(900), 100);
        assert_eq!(p.proportional_breakage(1), 0);
        assert_eq!(p.proportional_breakage(-50), 0);
        assert_eq!(
            Policy::default_for(Uuid::nil()).proportional_breakage(900),
            0
        );
    }

    #[test]
    fn out_of_range_values_are_named() {
        let mut e = Errors::default();
        check(
            &mut e,
            &NewPolicy {
                dormancy_days: 5,
                breakage_rate_bp: 10_000,
                breakage_method: "guess",
            },
        );
        let err = e.finish().unwrap_err().to_body();
        let fields: Vec<String> = err["details"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            fields,
            vec!["/dormancy_days", "/breakage_rate_bp", "/breakage_method"]
        );
    }
}
