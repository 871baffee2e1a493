//! Liability at an instant: per merchant and currency, the customer value of each class
//! the ledger's entries add up to at that instant, and how many wallets hold any.
//! Computed from the entries alone (docs/accounting.md); it never writes.
use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::credentials::{Principal, Scope};
use crate::domain::ledger::classes::ValueClass;
use crate::error::ApiError;
use crate::store;

/// One merchant's customer value in one currency at an instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Liability {
    pub merchant_id: Uuid,
    pub currency: String,
    pub actual_minor: i64,
    pub promo_released_minor: i64,
    pub promo_locked_minor: i64,
    pub escrow_minor: i64,
    /// Shown beside the liability, not part of it (`ValueClass::is_liability`).
    pub pending_topup_minor: i64,
    /// Wallets whose liability (every class but pending top-ups) is not zero.
    pub wallets_holding: i64,
}

impl Liability {
    pub fn class_minor(&self, class: ValueClass) -> i64 {
        match class {
            ValueClass::Actual => self.actual_minor,
            ValueClass::PromoReleased => self.promo_released_minor,
            ValueClass::PromoLocked => self.promo_locked_minor,
            ValueClass::Escrow => self.escrow_minor,
            ValueClass::PendingTopup => self.pending_topup_minor,
        }
    }

    fn class_mut(&mut self, class: ValueClass) -> &mut i64 {
        match class {
            ValueClass::Actual => &mut self.actual_minor,
            ValueClass::PromoReleased => &mut self.promo_released_minor,
            ValueClass::PromoLocked => &mut self.promo_locked_minor,
            ValueClass::Escrow => &mut self.escrow_minor,
            ValueClass::PendingTopup => &mut self.pending_topup_minor,
        }
    }

    /// What the merchant owes its customers: every class but pending top-ups.
    pub fn total_minor(&self) -> i64 {
        ValueClass::ALL
            .into_iter()
            .filter(|c| c.is_liability())
            .map(|c| self.class_minor(c))
            .sum()
    }
}

/// Whose stored value a key may read (liability, reports, the accounting policy): every
/// merchant of its integration (`None`, a platform key) or its own merchant (`Some`).
/// Stored value is held per merchant, not per brand or branch: keys scoped below a merchant
/// are refused.
pub fn reporting_scope(p: &Principal) -> Result<Option<Uuid>, ApiError> {
    match p.scope {
        Scope::Integration => Ok(None),
        Scope::Enterprise { enterprise_id } => Ok(Some(enterprise_id)),
        Scope::Brand { .. } | Scope::Branch { .. } => Err(ApiError::forbidden(
            "Stored value is held per merchant: read it with a merchant or platform key.",
        )),
    }
}

/// The merchants whose liability a caller may read, narrowed to `merchant_id` when given.
/// An id the caller cannot see narrows to none, exactly as a merchant without wallets does,
/// so the answer tells nothing about other tenants.
pub async fn readable_merchants<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    merchant_id: Option<Uuid>,
) -> Result<Vec<Uuid>, ApiError> {
    let mut visible = match reporting_scope(p)? {
        None => store::tenancy::linked_enterprises(c, p.integration_id).await?,
        Some(own) => vec![own],
    };
    if let Some(m) = merchant_id {
        visible.retain(|v| *v == m);
    }
    Ok(visible)
}

/// Every class's balance at `at` for `merchants`, one line per merchant and currency that
/// has ever held value, ordered by merchant then currency.
pub async fn at<C: ConnectionTrait>(
    c: &C,
    merchants: &[Uuid],
    currency: Option<&str>,
    at: DateTime<Utc>,
) -> Result<Vec<Liability>, ApiError> {
    let kinds: Vec<&str> = ValueClass::ALL.iter().map(|c| c.account_kind()).collect();
    let owed: Vec<&str> = ValueClass::ALL
        .iter()
        .filter(|c| c.is_liability())
        .map(|c| c.account_kind())
        .collect();
    let scope = |kinds| store::ledger::balances::Scope {
        merchants,
        kinds,
        currency,
        until: store::ledger::balances::Until::Through(at),
    };
    let mut out: Vec<Liability> = Vec::new();
    for b in store::ledger::balances::by_kind(c, &scope(&kinds)).await? {
        let Some(class) = ValueClass::of_kind(&b.account_kind) else {
            continue;
        };
        let i = line(&mut out, b.merchant_id, &b.currency);
        *out[i].class_mut(class) += b.amount_minor;
    }
    for h in store::ledger::balances::holders(c, &scope(&owed)).await? {
        let i = line(&mut out, h.merchant_id, &h.currency);
        out[i].wallets_holding = h.wallets;
    }
    out.sort_by(|a, b| (a.merchant_id, &a.currency).cmp(&(b.merchant_id, &b.currency)));
    Ok(out)
}

/// The index of the merchant's line in that currency, added (all zero) if new.
fn line(out: &mut Vec<Liability>, merchant_id: Uuid, currency: &str) -> usize {
    match out
        .iter()
        .position(|l| l.merchant_id == merchant_id && l.currency == currency)
    {
        Some(i) => i,
        None => {
            out.push(Liability {
                merchant_id,
                currency: currency.to_string(),
                ..Default::default()
            });
            out.len() - 1
        }
    }
}

/// The most days `daily` answers at once.
pub const MAX_DAILY_DAYS: i64 = 92;

/// Each UTC day's closing liability of one merchant, `from` to `to` (both included, at most
/// `MAX_DAILY_DAYS`): the liability at the last instant of the day.
pub async fn daily<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    currency: Option<&str>,
    from: chrono::NaiveDate,
    to: chrono::NaiveDate,
) -> Result<Vec<(chrono::NaiveDate, Vec<Liability>)>, ApiError> {
    let mut out = Vec::new();
    let mut day = from;
    while day <= to && (day - from).num_days() < MAX_DAILY_DAYS {
        let Some(next) = day.succ_opt() else { break };
        let end = next.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc()
            - chrono::Duration::microseconds(1);
        out.push((day, at(c, &[merchant], currency, end).await?));
        day = next;
    }
    Ok(out)
}
