//! Daily snapshots of customer value (docs/accounting.md, "Snapshots"): per merchant,
//! currency and UTC day on which something moved, what each posting kind moved on each
//! value-class account kind, and each class's closing balance with the number of wallets
//! holding any. The liability at an instant and the roll-forward read a snapshot and at
//! most a day of entries instead of the whole history (`liability::balances`, `Moves`).
//!
//! The ledger alone builds them, so they can always be dropped and built again
//! (`wallet-api ledger snapshots --reset`). A day is built once it is sealed: it ended
//! (by the merchant's clock, a sandbox's test clock) more than `SEAL_MARGIN` ago, longer
//! than any money transaction stays open, so no entry can still arrive in it. Each day is
//! one transaction that first moves the merchant's mark from the day before, so builders
//! on many workers at once write each day exactly once; days without entries are skipped
//! in one step. `verify` builds every day again in memory and compares.
use std::collections::HashMap;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use entities::{ledger_day_closing, ledger_day_movement};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::ledger::classes::ValueClass;
use crate::domain::ledger::liability::{self, Liability, utc_day_start};
use crate::error::ApiError;
use crate::store::{
    self, Db,
    ledger::balances::{self, Movement, Scope, Until},
    ledger::snapshots::FIRST_DAY,
};

/// How long after a UTC day ends (by the merchant's clock) it is built.
pub const SEAL_MARGIN: Duration = Duration::minutes(15);

/// The most days one merchant's build writes before the next merchant's turn.
pub const DAYS_PER_TURN: u32 = 400;

/// The last UTC day that is sealed at `now`.
pub fn sealed_through(now: DateTime<Utc>) -> Option<NaiveDate> {
    (now - SEAL_MARGIN).date_naive().pred_opt()
}

/// One day's snapshot rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Day {
    pub movements: Vec<ledger_day_movement::Model>,
    pub closings: Vec<ledger_day_closing::Model>,
}

fn kinds() -> Vec<&'static str> {
    ValueClass::ALL.iter().map(|c| c.account_kind()).collect()
}

fn owed() -> Vec<&'static str> {
    ValueClass::ALL
        .iter()
        .filter(|c| c.is_liability())
        .map(|c| c.account_kind())
        .collect()
}

/// Day `day`'s rows for `merchant`, from the entries of that day and the closings of the
/// day before (`previous`: one line per currency, as at the end of the day before).
/// Nothing if no value moved that day.
pub async fn compute_day<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    day: NaiveDate,
    previous: &[Liability],
) -> Result<Day, ApiError> {
    let (start, end) = (utc_day_start(day), utc_day_start(day) + Duration::days(1));
    let moved = balances::movements(c, merchant, &kinds(), start, end).await?;
    if moved.is_empty() {
        return Ok(Day::default());
    }
    let mut lines: Vec<Liability> = Vec::new();
    for m in &moved {
        let Some(class) = ValueClass::of_kind(&m.account_kind) else {
            continue;
        };
        let i = match lines.iter().position(|l| l.currency == m.currency) {
            Some(i) => i,
            None => {
                let carried = previous
                    .iter()
                    .find(|p| p.currency == m.currency)
                    .cloned()
                    .unwrap_or_else(|| Liability {
                        merchant_id: merchant,
                        currency: m.currency.clone(),
                        ..Default::default()
                    });
                lines.push(carried);
                lines.len() - 1
            }
        };
        *lines[i].class_mut(class) += m.amount_minor;
    }
    let owed = owed();
    let merchants = [merchant];
    let scope = Scope {
        merchants: &merchants,
        kinds: &owed,
        currency: None,
        since: Some(start),
        until: Until::Before(end),
    };
    for h in balances::holders_delta(c, &scope).await? {
        if let Some(l) = lines.iter_mut().find(|l| l.currency == h.currency) {
            l.wallets_holding += h.wallets;
        }
    }
    let mut closings: Vec<_> = lines.iter().map(|l| l.to_snapshot(day)).collect();
    closings.sort_by(|a, b| a.currency.cmp(&b.currency));
    let mut movements: Vec<_> = moved
        .into_iter()
        .map(|m| ledger_day_movement::Model {
            merchant_id: merchant,
            day,
            currency: m.currency,
            account_kind: m.account_kind,
            posting_kind: m.posting_kind,
            amount_minor: m.amount_minor,
        })
        .collect();
    movements.sort_by(|a, b| key(a).cmp(&key(b)));
    Ok(Day {
        movements,
        closings,
    })
}

fn key(m: &ledger_day_movement::Model) -> (&str, &str, &str) {
    (&m.currency, &m.account_kind, &m.posting_kind)
}

/// The next day after `built` (or from the beginning) that has entries, if it is sealed
/// by `through`; else `None`.
async fn next_day<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    built: Option<NaiveDate>,
    through: NaiveDate,
) -> Result<Option<NaiveDate>, ApiError> {
    let since = built.map(|b| utc_day_start(b) + Duration::days(1));
    Ok(store::ledger::snapshots::next_entry_at(c, merchant, since)
        .await?
        .map(|t| t.date_naive())
        .filter(|d| *d <= through))
}

/// Builds `merchant`'s sealed days at `now` (its clock), up to `max_days` of them; returns
/// how many days were written. Another builder's progress is never redone: a day whose
/// mark moved meanwhile is dropped and the build goes on from where the mark stands.
pub async fn build(
    db: &Db,
    merchant: Uuid,
    now: DateTime<Utc>,
    max_days: u32,
) -> Result<u32, ApiError> {
    let Some(through) = sealed_through(now) else {
        return Ok(0);
    };
    let built = match store::ledger::snapshots::mark(db, merchant).await? {
        Some(b) => b,
        None => {
            store::ledger::snapshots::ensure_mark(db, merchant, Utc::now()).await?;
            None
        }
    };
    let mut built = built;
    let mut written = 0;
    while written < max_days && built.is_none_or(|b| b < through) {
        let Some(day) = next_day(db, merchant, built, through).await? else {
            // Nothing more until `through`: no rows to write, only the mark to move.
            store::ledger::snapshots::advance_mark(db, merchant, built, through, Utc::now())
                .await?;
            break;
        };
        let previous = match day.pred_opt() {
            Some(d) => liability::line_per_currency(
                store::ledger::snapshots::closings_through(db, &[merchant], None, d).await?,
            ),
            None => Vec::new(),
        };
        let rows = compute_day(db, merchant, day, &previous).await?;
        let won = store::in_transaction(db, async |txn| {
            if !store::ledger::snapshots::advance_mark(txn, merchant, built, day, Utc::now())
                .await?
            {
                return Ok::<bool, ApiError>(false);
            }
            store::ledger::snapshots::insert_day(txn, rows.movements, rows.closings).await?;
            Ok(true)
        })
        .await?;
        if !won {
            // Another builder is ahead: carry on from its mark.
            built = store::ledger::snapshots::mark(db, merchant)
                .await?
                .flatten();
            continue;
        }
        built = Some(day);
        written += 1;
    }
    Ok(written)
}

/// What one pass over every merchant built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    pub merchants: u32,
    pub days: u32,
}

/// Builds every merchant's sealed days by its own clock. A merchant whose build fails is
/// reported and left for the next pass; the others still run.
pub async fn build_all(db: &Db) -> Result<Pass, ApiError> {
    let mut pass = Pass::default();
    for (merchant, offset) in store::ledger::snapshots::merchant_clocks(db).await? {
        let now = Utc::now() + Duration::seconds(offset);
        match build(db, merchant, now, DAYS_PER_TURN).await {
            Ok(0) => {}
            Ok(n) => {
                pass.merchants += 1;
                pass.days += n;
            }
            Err(e) => {
                tracing::warn!(merchant_id = %merchant, error = ?e, "building ledger snapshots failed")
            }
        }
    }
    Ok(pass)
}

/// Builds every sealed day at once (of one merchant, or all), failing on the first error:
/// the operators' `wallet-api ledger build-snapshots`.
pub async fn build_now(db: &Db, merchant: Option<Uuid>) -> Result<Pass, ApiError> {
    let mut pass = Pass::default();
    for (m, offset) in store::ledger::snapshots::merchant_clocks(db).await? {
        if merchant.is_some_and(|only| only != m) {
            continue;
        }
        let n = build(db, m, Utc::now() + Duration::seconds(offset), u32::MAX).await?;
        if n > 0 {
            pass.merchants += 1;
            pass.days += n;
        }
    }
    Ok(pass)
}

/// Builds every sealed day of the merchant again from the ledger, in memory, carrying its
/// own closings from day to day, and compares each with the stored rows: each difference,
/// described. Days after the mark are not stored yet and not compared.
pub async fn verify<C: ConnectionTrait>(c: &C, merchant: Uuid) -> Result<Vec<String>, ApiError> {
    let mut out = Vec::new();
    let Some(Some(through)) = store::ledger::snapshots::mark(c, merchant).await? else {
        let stray = store::ledger::snapshots::closings_between(
            c,
            merchant,
            FIRST_DAY,
            NaiveDate::from_ymd_opt(9999, 12, 31).unwrap_or(FIRST_DAY),
        )
        .await?;
        if let Some(s) = stray.first() {
            out.push(format!(
                "merchant {merchant}: snapshot rows from {} without a mark",
                s.day
            ));
        }
        return Ok(out);
    };
    let mut stored: HashMap<NaiveDate, Day> = HashMap::new();
    for m in store::ledger::snapshots::movements_between(c, merchant, FIRST_DAY, through).await? {
        stored.entry(m.day).or_default().movements.push(m);
    }
    for s in store::ledger::snapshots::closings_between(c, merchant, FIRST_DAY, through).await? {
        stored.entry(s.day).or_default().closings.push(s);
    }
    let mut carried: Vec<Liability> = Vec::new();
    let mut built = None;
    while let Some(day) = next_day(c, merchant, built, through).await? {
        let rows = compute_day(c, merchant, day, &carried).await?;
        let mut kept = stored.remove(&day).unwrap_or_default();
        kept.movements.sort_by(|a, b| key(a).cmp(&key(b)));
        kept.closings.sort_by(|a, b| a.currency.cmp(&b.currency));
        if kept != rows {
            out.push(format!(
                "merchant {merchant} {day}: stored {} movement and {} closing rows differ from the ledger's {} and {} (closings stored {:?}, ledger {:?})",
                kept.movements.len(),
                kept.closings.len(),
                rows.movements.len(),
                rows.closings.len(),
                kept.closings
                    .iter()
                    .map(|s| (&s.currency, s.actual_minor, s.wallets_holding))
                    .collect::<Vec<_>>(),
                rows.closings
                    .iter()
                    .map(|s| (&s.currency, s.actual_minor, s.wallets_holding))
                    .collect::<Vec<_>>(),
            ));
        }
        for s in &rows.closings {
            let next = Liability::from_snapshot(s);
            match carried.iter_mut().find(|l| l.currency == s.currency) {
                Some(l) => *l = next,
                None => carried.push(next),
            }
        }
        built = Some(day);
    }
    let mut extra: Vec<NaiveDate> = stored.into_keys().collect();
    extra.sort();
    for day in extra {
        out.push(format!(
            "merchant {merchant} {day}: snapshot rows for a day without entries"
        ));
    }
    Ok(out)
}

/// `verify` for one merchant, or every merchant.
pub async fn verify_all<C: ConnectionTrait>(
    c: &C,
    merchant: Option<Uuid>,
) -> Result<Vec<String>, ApiError> {
    let merchants = match merchant {
        Some(m) => vec![m],
        None => store::ledger::snapshots::merchant_clocks(c)
            .await?
            .into_iter()
            .map(|(m, _)| m)
            .collect(),
    };
    let mut out = Vec::new();
    for m in merchants {
        out.extend(verify(c, m).await?);
    }
    Ok(out)
}

/// What moved a merchant's value accounts over windows of any length, read from the stored
/// days the window covers whole and from the entries of its ragged ends (a business day in
/// another time zone than UTC straddles two UTC days).
pub struct Moves {
    merchant: Uuid,
    built: Option<NaiveDate>,
    days: HashMap<NaiveDate, Vec<Movement>>,
}

impl Moves {
    /// The stored days of `merchant` that windows inside `[from, to)` can use.
    pub async fn load<C: ConnectionTrait>(
        c: &C,
        merchant: Uuid,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Moves, ApiError> {
        let built = store::ledger::snapshots::mark(c, merchant).await?.flatten();
        let mut days: HashMap<NaiveDate, Vec<Movement>> = HashMap::new();
        if let Some(b) = built {
            let last = (to.date_naive()).min(b);
            for m in
                store::ledger::snapshots::movements_between(c, merchant, from.date_naive(), last)
                    .await?
            {
                days.entry(m.day).or_default().push(Movement {
                    currency: m.currency,
                    account_kind: m.account_kind,
                    posting_kind: m.posting_kind,
                    amount_minor: m.amount_minor,
                });
            }
        }
        Ok(Moves {
            merchant,
            built,
            days,
        })
    }

    /// What moved in `[from, to)`.
    pub async fn between<C: ConnectionTrait>(
        &self,
        c: &C,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<Movement>, ApiError> {
        let kinds = kinds();
        let mut out = Vec::new();
        let mut at = from;
        while at < to {
            let day = at.date_naive();
            let day_end = utc_day_start(day) + Duration::days(1);
            let piece_end = day_end.min(to);
            let whole = at == utc_day_start(day) && piece_end == day_end;
            if whole && self.built.is_some_and(|b| day <= b) {
                out.extend(self.days.get(&day).cloned().unwrap_or_default());
            } else {
                out.extend(balances::movements(c, self.merchant, &kinds, at, piece_end).await?);
            }
            at = piece_end;
        }
        Ok(out)
    }
}
