//! Liability at an instant: per merchant and currency, the customer value of each class
//! the ledger's entries add up to at that instant, and how many wallets hold any.
//! Computed from the entries alone (docs/accounting.md); it never writes.
use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, NaiveDate, Utc};
use entities::ledger_hour_closing;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::credentials::{Principal, Scope};
use crate::domain::ledger::classes::ValueClass;
use crate::error::ApiError;
use crate::store;
use crate::store::ledger::balances::{Since, Until};

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

    pub fn class_mut(&mut self, class: ValueClass) -> &mut i64 {
        match class {
            ValueClass::Actual => &mut self.actual_minor,
            ValueClass::PromoReleased => &mut self.promo_released_minor,
            ValueClass::PromoLocked => &mut self.promo_locked_minor,
            ValueClass::Escrow => &mut self.escrow_minor,
            ValueClass::PendingTopup => &mut self.pending_topup_minor,
        }
    }

    /// A snapshot's closing (an hour's end) as a line.
    pub fn from_snapshot(s: &ledger_hour_closing::Model) -> Liability {
        let mut l = Liability {
            merchant_id: s.merchant_id,
            currency: s.currency.clone(),
            ..Default::default()
        };
        l.add_snapshot(s);
        l
    }

    /// Adds a snapshot's closing (an hour's end) to this line.
    pub fn add_snapshot(&mut self, s: &ledger_hour_closing::Model) {
        self.actual_minor += s.actual_minor;
        self.promo_released_minor += s.promo_released_minor;
        self.promo_locked_minor += s.promo_locked_minor;
        self.escrow_minor += s.escrow_minor;
        self.pending_topup_minor += s.pending_topup_minor;
        self.wallets_holding += s.wallets_holding;
    }

    /// The snapshot row this line is, as the end of the hour starting at `hour`.
    pub fn to_snapshot(&self, hour: DateTime<Utc>) -> ledger_hour_closing::Model {
        ledger_hour_closing::Model {
            merchant_id: self.merchant_id,
            currency: self.currency.clone(),
            hour,
            actual_minor: self.actual_minor,
            promo_released_minor: self.promo_released_minor,
            promo_locked_minor: self.promo_locked_minor,
            escrow_minor: self.escrow_minor,
            pending_topup_minor: self.pending_topup_minor,
            wallets_holding: self.wallets_holding,
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
    balances(c, merchants, currency, Until::Through(at), Holding::Counted).await
}

/// Whether `balances` counts the wallets holding value (the roll-forward does not need it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    Counted,
    Skipped,
}

/// How one merchant's balance at an instant is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Read {
    /// Every entry up to the instant: the merchant has no snapshots yet.
    Entries,
    /// The closing at `base` (an hour's end), plus the entries from `base` to the instant.
    Forward(DateTime<Utc>),
    /// The closing at the end of the instant's hour (`end`), less the entries after the
    /// instant up to `end`: the shorter way in the second half of an hour.
    Backward(DateTime<Utc>),
}

/// Every class's balance of `merchants` at `until`, from each merchant's snapshot
/// (`domain::ledger::snapshots`) at the hour's end nearest the instant that the snapshots
/// have, and the entries between the two: at most half an hour of them when the snapshots
/// are current, every entry for a merchant without any. Exact either way.
pub async fn balances<C: ConnectionTrait>(
    c: &C,
    merchants: &[Uuid],
    currency: Option<&str>,
    until: Until,
    holding: Holding,
) -> Result<Vec<Liability>, ApiError> {
    let instant = match until {
        Until::Through(t) | Until::Before(t) => t,
    };
    let hour = hour_start(instant);
    let next = hour + chrono::Duration::hours(1);
    let mut reads: BTreeMap<Read, Vec<Uuid>> = BTreeMap::new();
    let marks = store::ledger::snapshots::built_until(c, merchants).await?;
    for m in merchants {
        let built_until = marks.iter().find(|(id, _)| id == m).map(|(_, b)| *b);
        let read = match built_until {
            None => Read::Entries,
            Some(b) if b >= next && instant - hour >= chrono::Duration::minutes(30) => {
                Read::Backward(next)
            }
            Some(b) => Read::Forward(b.min(hour)),
        };
        reads.entry(read).or_default().push(*m);
    }
    let (kinds, owed) = (ValueClass::account_kinds(), ValueClass::liability_kinds());
    let mut out: Vec<Liability> = Vec::new();
    for (read, merchants) in &reads {
        // The snapshot to start from, the entries between it and the instant, and whether
        // they are added (after the snapshot) or taken away (before it).
        let (base, since, to, sign) = match *read {
            Read::Entries => (None, None, until, 1),
            Read::Forward(b) => (Some(b), Some(Since::At(b)), until, 1),
            Read::Backward(end) => {
                let after = match until {
                    // The balance at the instant took the entries made at it.
                    Until::Through(t) => Since::After(t),
                    Until::Before(t) => Since::At(t),
                };
                (Some(end), Some(after), Until::Before(end), -1)
            }
        };
        if let Some(base) = base {
            for s in store::ledger::snapshots::closings_before(c, merchants, currency, base).await?
            {
                let i = line(&mut out, s.merchant_id, &s.currency);
                out[i].add_snapshot(&s);
            }
        }
        let scope = |kinds| store::ledger::balances::Scope {
            merchants,
            kinds,
            currency,
            since,
            until: to,
        };
        for b in store::ledger::balances::by_kind(c, &scope(&kinds)).await? {
            let Some(class) = ValueClass::of_kind(&b.account_kind) else {
                continue;
            };
            let i = line(&mut out, b.merchant_id, &b.currency);
            *out[i].class_mut(class) += sign * b.amount_minor;
        }
        if holding == Holding::Counted {
            for h in store::ledger::balances::holders_delta(c, &scope(&owed)).await? {
                let i = line(&mut out, h.merchant_id, &h.currency);
                out[i].wallets_holding += sign * h.wallets;
            }
        }
        if matches!(read, Read::Backward(_)) {
            drop_unborn(c, &mut out, merchants, &kinds, hour, until).await?;
        }
    }
    out.sort_by(|a, b| (a.merchant_id, &a.currency).cmp(&(b.merchant_id, &b.currency)));
    Ok(out)
}

/// Read backwards, a currency a merchant first used after the instant (in the same hour)
/// nets to an all-zero line that reading forwards would not have: drops those lines. Only
/// all-zero lines are looked at, and each with two short reads: a closing before the hour,
/// or an entry between the hour's start and the instant.
async fn drop_unborn<C: ConnectionTrait>(
    c: &C,
    out: &mut Vec<Liability>,
    merchants: &[Uuid],
    kinds: &[&str],
    hour: DateTime<Utc>,
    until: Until,
) -> Result<(), ApiError> {
    let zero: Vec<(Uuid, String)> = out
        .iter()
        .filter(|l| {
            merchants.contains(&l.merchant_id)
                && l.wallets_holding == 0
                && ValueClass::ALL.iter().all(|c| l.class_minor(*c) == 0)
        })
        .map(|l| (l.merchant_id, l.currency.clone()))
        .collect();
    for (m, currency) in zero {
        let before_hour =
            store::ledger::snapshots::closings_before(c, &[m], Some(&currency), hour).await?;
        let born = !before_hour.is_empty()
            || !store::ledger::balances::by_kind(
                c,
                &store::ledger::balances::Scope {
                    merchants: &[m],
                    kinds,
                    currency: Some(&currency),
                    since: Some(Since::At(hour)),
                    until,
                },
            )
            .await?
            .is_empty();
        if !born {
            out.retain(|l| !(l.merchant_id == m && l.currency == currency));
        }
    }
    Ok(())
}

/// Snapshot closings as lines.
pub fn line_per_currency(rows: Vec<ledger_hour_closing::Model>) -> Vec<Liability> {
    rows.iter().map(Liability::from_snapshot).collect()
}

/// The first instant of the UTC hour `t` is in.
pub fn hour_start(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::Duration::hours(1)).unwrap_or(t)
}

/// The first instant of a UTC day.
pub fn utc_day_start(day: NaiveDate) -> DateTime<Utc> {
    day.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc()
}

/// The index of the merchant's line in that currency, added (all zero) if new.
pub fn line(out: &mut Vec<Liability>, merchant_id: Uuid, currency: &str) -> usize {
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
