//! Snapshots of customer value (docs/accounting.md, "Snapshots"): per merchant, currency
//! and UTC hour in which something moved, what each posting kind moved on each value-class
//! account kind, and each class's closing balance with the number of wallets holding any.
//! The liability at an instant and the roll-forward read snapshots and at most an hour of
//! entries instead of the whole history (`liability::balances`, `Moves`).
//!
//! The ledger alone builds them, so they can always be dropped and built again
//! (`wallet-api ledger reset-snapshots`). An hour is built once it is sealed: it ended (by
//! the merchant's clock, a sandbox's test clock) more than `SEAL_MARGIN` ago, longer than
//! any money transaction stays open, so no entry can still arrive in it. Hours are built in
//! pieces of at most one UTC day (a history caught up a day at a time, the current day an
//! hour or so at a time), each piece one transaction that first moves the merchant's mark
//! from where the piece starts, so builders on many workers at once write each hour
//! exactly once; hours without entries are skipped in one step. `verify` builds every
//! sealed hour again in memory and compares.
use std::collections::HashMap;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use entities::{ledger_hour_closing, ledger_hour_movement};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::ledger::classes::ValueClass;
use crate::domain::ledger::liability::{self, Liability, utc_day_start};
use crate::error::ApiError;
use crate::store::{
    self, Db,
    ledger::balances::{self, Movement, Scope, Since, Until},
    ledger::snapshots::{FIRST_DAY, LAST_DAY},
};

/// How long after an hour ends (by the merchant's clock) it is built.
pub const SEAL_MARGIN: Duration = Duration::minutes(15);

/// The most pieces (a UTC day's hours, or fewer) one merchant's build writes before the
/// next merchant's turn.
pub const DAYS_PER_TURN: u32 = 400;

/// Up to where the hours are sealed at `now`: the start of the first hour that is not.
pub fn sealed_until(now: DateTime<Utc>) -> DateTime<Utc> {
    liability::hour_start(now - SEAL_MARGIN)
}

/// The snapshot rows of some hours.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    pub movements: Vec<ledger_hour_movement::Model>,
    pub closings: Vec<ledger_hour_closing::Model>,
}

/// The rows of the hours in `[from, to)` (hour starts) for `merchant`, from their entries
/// and the closings before them (`previous`: one line per currency, as at `from`): for each
/// hour in which value moved, what each posting kind moved and the closings after it.
/// Nothing if none moved.
pub async fn compute_hours<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    previous: &[Liability],
) -> Result<Rows, ApiError> {
    let (kinds, owed, merchants) = (
        ValueClass::account_kinds(),
        ValueClass::liability_kinds(),
        [merchant],
    );
    let mut lines: Vec<Liability> = previous.to_vec();
    let mut out = Rows::default();
    let hours = (0..).map(|h| from + Duration::hours(h));
    for hour in hours.take_while(|h| *h < to) {
        let next = hour + Duration::hours(1);
        let moved = balances::movements(c, merchant, &kinds, hour, next).await?;
        if moved.is_empty() {
            continue;
        }
        let mut moved_in: Vec<String> = Vec::new();
        for m in moved {
            if let Some(class) = ValueClass::of_kind(&m.account_kind) {
                let i = liability::line(&mut lines, merchant, &m.currency);
                *lines[i].class_mut(class) += m.amount_minor;
            }
            moved_in.push(m.currency.clone());
            out.movements.push(ledger_hour_movement::Model {
                merchant_id: merchant,
                hour,
                currency: m.currency,
                account_kind: m.account_kind,
                posting_kind: m.posting_kind,
                amount_minor: m.amount_minor,
            });
        }
        let scope = Scope {
            merchants: &merchants,
            kinds: &owed,
            currency: None,
            since: Some(Since::At(hour)),
            until: Until::Before(next),
        };
        for d in balances::holders_delta(c, &scope).await? {
            let i = liability::line(&mut lines, merchant, &d.currency);
            lines[i].wallets_holding += d.wallets;
        }
        moved_in.sort();
        moved_in.dedup();
        for l in lines.iter().filter(|l| moved_in.contains(&l.currency)) {
            out.closings.push(l.to_snapshot(hour));
        }
    }
    out.movements.sort_by(|a, b| key(a).cmp(&key(b)));
    out.closings
        .sort_by(|a, b| (a.hour, &a.currency).cmp(&(b.hour, &b.currency)));
    Ok(out)
}

/// Each currency's line as at the end of the last of `closings` (in hour order).
fn carried_after(carried: &mut Vec<Liability>, closings: &[ledger_hour_closing::Model]) {
    for s in closings {
        let next = Liability::from_snapshot(s);
        match carried.iter_mut().find(|l| l.currency == s.currency) {
            Some(l) => *l = next,
            None => carried.push(next),
        }
    }
}

fn key(m: &ledger_hour_movement::Model) -> (DateTime<Utc>, &str, &str, &str) {
    (m.hour, &m.currency, &m.account_kind, &m.posting_kind)
}

/// The next piece to build after `built` (or from the beginning), up to `until`: from the
/// hour of the first entry after `built` to the end of that UTC day or `until`, whichever
/// comes first; `None` if no entry comes before `until`.
async fn next_piece<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    built: Option<DateTime<Utc>>,
    until: DateTime<Utc>,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, ApiError> {
    Ok(store::ledger::snapshots::next_entry_at(c, merchant, built)
        .await?
        .filter(|t| *t < until)
        .map(|t| {
            let day_end = utc_day_start(t.date_naive()) + Duration::days(1);
            (liability::hour_start(t), day_end.min(until))
        }))
}

/// Builds `merchant`'s sealed hours at `now` (its clock), up to `max_pieces` pieces of at
/// most a UTC day; returns how many pieces were written. Another builder's progress is
/// never redone: a piece whose mark moved meanwhile is dropped and the build goes on from
/// where the mark stands.
pub async fn build(
    db: &Db,
    merchant: Uuid,
    now: DateTime<Utc>,
    max_pieces: u32,
) -> Result<u32, ApiError> {
    let until = sealed_until(now);
    let mut built = match store::ledger::snapshots::mark(db, merchant).await? {
        Some(b) => b,
        None => {
            store::ledger::snapshots::ensure_mark(db, merchant, Utc::now()).await?;
            None
        }
    };
    let mut written = 0;
    while written < max_pieces && built.is_none_or(|b| b < until) {
        let Some((from, to)) = next_piece(db, merchant, built, until).await? else {
            // Nothing more until `until`: no rows to write, only the mark to move.
            store::ledger::snapshots::advance_mark(db, merchant, built, until, Utc::now()).await?;
            break;
        };
        let previous = liability::line_per_currency(
            store::ledger::snapshots::closings_before(db, &[merchant], None, from).await?,
        );
        let rows = compute_hours(db, merchant, from, to, &previous).await?;
        let won = store::in_transaction(db, async |txn| {
            if !store::ledger::snapshots::advance_mark(txn, merchant, built, to, Utc::now()).await?
            {
                return Ok::<bool, ApiError>(false);
            }
            store::ledger::snapshots::insert_rows(txn, rows.movements, rows.closings).await?;
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
        built = Some(to);
        written += 1;
    }
    Ok(written)
}

/// What one pass over every merchant built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    pub merchants: u32,
    /// Pieces written: a UTC day's hours, or fewer.
    pub pieces: u32,
}

/// Builds every merchant's sealed hours by its own clock. A merchant whose build fails is
/// reported and left for the next pass; the others still run.
pub async fn build_all(db: &Db) -> Result<Pass, ApiError> {
    let mut pass = Pass::default();
    for (merchant, offset) in store::ledger::snapshots::merchant_clocks(db).await? {
        let now = Utc::now() + Duration::seconds(offset);
        match build(db, merchant, now, DAYS_PER_TURN).await {
            Ok(0) => {}
            Ok(n) => {
                pass.merchants += 1;
                pass.pieces += n;
            }
            Err(e) => {
                tracing::warn!(merchant_id = %merchant, error = ?e, "building ledger snapshots failed")
            }
        }
    }
    Ok(pass)
}

/// Builds every sealed hour at once (of one merchant, or all), failing on the first error:
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
            pass.pieces += n;
        }
    }
    Ok(pass)
}

/// Builds every hour of the merchant before its mark again from the ledger, in memory,
/// carrying its own closings from piece to piece, and compares each UTC day's rows with the
/// stored ones: each difference, described. Hours after the mark are not stored yet and not
/// compared.
pub async fn verify<C: ConnectionTrait>(c: &C, merchant: Uuid) -> Result<Vec<String>, ApiError> {
    let mut out = Vec::new();
    let Some(Some(until)) = store::ledger::snapshots::mark(c, merchant).await? else {
        let stray = store::ledger::snapshots::movements_between(
            c,
            merchant,
            utc_day_start(FIRST_DAY),
            utc_day_start(LAST_DAY),
        )
        .await?;
        if let Some(s) = stray.first() {
            out.push(format!(
                "merchant {merchant}: snapshot rows from {} without a mark",
                s.hour
            ));
        }
        return Ok(out);
    };
    let mut stored: HashMap<NaiveDate, Rows> = HashMap::new();
    let (first, after) = (utc_day_start(FIRST_DAY), until);
    for m in store::ledger::snapshots::movements_between(c, merchant, first, after).await? {
        stored
            .entry(m.hour.date_naive())
            .or_default()
            .movements
            .push(m);
    }
    for s in store::ledger::snapshots::closings_between(c, merchant, first, after).await? {
        stored
            .entry(s.hour.date_naive())
            .or_default()
            .closings
            .push(s);
    }
    let mut carried: Vec<Liability> = Vec::new();
    let mut built = None;
    while let Some((from, to)) = next_piece(c, merchant, built, until).await? {
        // A piece is one UTC day's hours from its first entry on (`next_piece`).
        let day = from.date_naive();
        let rows = compute_hours(c, merchant, from, to, &carried).await?;
        let mut kept = stored.remove(&day).unwrap_or_default();
        kept.movements.sort_by(|a, b| key(a).cmp(&key(b)));
        kept.closings
            .sort_by(|a, b| (a.hour, &a.currency).cmp(&(b.hour, &b.currency)));
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
        carried_after(&mut carried, &rows.closings);
        built = Some(to);
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
/// hours the window covers whole and from the entries of its ragged ends (a business day in
/// a zone whose offset is not whole hours starts and ends inside an hour).
pub struct Moves {
    merchant: Uuid,
    /// Hours before this are stored.
    built_until: Option<DateTime<Utc>>,
    hours: HashMap<DateTime<Utc>, Vec<Movement>>,
}

impl Moves {
    /// The stored hours of `merchant` that windows inside `[from, to)` can use.
    pub async fn load<C: ConnectionTrait>(
        c: &C,
        merchant: Uuid,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Moves, ApiError> {
        let built_until = store::ledger::snapshots::mark(c, merchant).await?.flatten();
        let mut hours: HashMap<DateTime<Utc>, Vec<Movement>> = HashMap::new();
        if let Some(b) = built_until {
            let (first, last) = (liability::hour_start(from), to.min(b));
            for m in store::ledger::snapshots::movements_between(c, merchant, first, last).await? {
                hours.entry(m.hour).or_default().push(Movement {
                    currency: m.currency,
                    account_kind: m.account_kind,
                    posting_kind: m.posting_kind,
                    amount_minor: m.amount_minor,
                });
            }
        }
        Ok(Moves {
            merchant,
            built_until,
            hours,
        })
    }

    /// What moved in `[from, to)`.
    pub async fn between<C: ConnectionTrait>(
        &self,
        c: &C,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<Movement>, ApiError> {
        let kinds = ValueClass::account_kinds();
        let mut out = Vec::new();
        let mut at = from;
        while at < to {
            let hour = liability::hour_start(at);
            let hour_end = hour + Duration::hours(1);
            let piece_end = hour_end.min(to);
            let whole = at == hour && piece_end == hour_end;
            if whole && self.built_until.is_some_and(|b| hour_end <= b) {
                out.extend(self.hours.get(&hour).cloned().unwrap_or_default());
                at = piece_end;
                continue;
            }
            // Entries for the rest of the window that no stored hour covers, in one read:
            // up to the next whole stored hour, or the end.
            let mut stop = piece_end;
            while stop < to
                && !(liability::hour_start(stop) == stop
                    && stop + Duration::hours(1) <= to
                    && self
                        .built_until
                        .is_some_and(|b| stop + Duration::hours(1) <= b))
            {
                stop = (liability::hour_start(stop) + Duration::hours(1)).min(to);
            }
            out.extend(balances::movements(c, self.merchant, &kinds, at, stop).await?);
            at = stop;
        }
        Ok(out)
    }
}
