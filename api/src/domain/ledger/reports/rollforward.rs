//! The daily roll-forward: per merchant, currency, business day and class, the opening
//! balance, what each type of movement did, and the closing balance, from the ledger alone.
//! `opening + movements = closing` on every row by construction; a day's closing is the
//! next day's opening; and the last closing is checked against the ledger's own balance at
//! the end of the range before the file is published (a report that does not close is a
//! failed run, never a file).
use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::ledger::classes::ValueClass;
use crate::domain::ledger::liability::{self, Holding, Liability};
use crate::domain::ledger::policy;
use crate::domain::ledger::posting::PostingKind;
use crate::domain::ledger::reports::aging;
use crate::domain::ledger::reports::error::RunError;
use crate::domain::ledger::reports::file::{Cell, FileWriter};
use crate::domain::ledger::snapshots::Moves;
use crate::store::ledger::balances::Until;

/// The movement columns, in the file's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Movement {
    LoadsSku,
    LoadsSettlement,
    Bonuses,
    Redemptions,
    Refunds,
    Voids,
    Reversals,
    Expiries,
    Clawbacks,
    Adjustments,
    EscrowIn,
    EscrowOut,
    Transfers,
    PendingRequests,
    /// A posting kind this version does not know (a newer writer's): still counted, so the
    /// row closes.
    Other,
}

impl Movement {
    pub const ALL: [Movement; 15] = [
        Movement::LoadsSku,
        Movement::LoadsSettlement,
        Movement::Bonuses,
        Movement::Redemptions,
        Movement::Refunds,
        Movement::Voids,
        Movement::Reversals,
        Movement::Expiries,
        Movement::Clawbacks,
        Movement::Adjustments,
        Movement::EscrowIn,
        Movement::EscrowOut,
        Movement::Transfers,
        Movement::PendingRequests,
        Movement::Other,
    ];

    /// The column a posting of `kind` moves (every kind has one).
    pub fn of(kind: PostingKind) -> Movement {
        match kind {
            PostingKind::TopupSku => Movement::LoadsSku,
            PostingKind::TopupSettlement => Movement::LoadsSettlement,
            PostingKind::GrantAccrual => Movement::Bonuses,
            PostingKind::Payment => Movement::Redemptions,
            PostingKind::Refund => Movement::Refunds,
            PostingKind::Void => Movement::Voids,
            PostingKind::TopupReversal => Movement::Reversals,
            PostingKind::GrantExpiry => Movement::Expiries,
            PostingKind::Clawback | PostingKind::RewardReversal => Movement::Clawbacks,
            PostingKind::Adjustment => Movement::Adjustments,
            PostingKind::EscrowHold => Movement::EscrowIn,
            PostingKind::EscrowRelease => Movement::EscrowOut,
            PostingKind::GrantRelease => Movement::Transfers,
            PostingKind::TopupRequested | PostingKind::TopupRequestCleared => {
                Movement::PendingRequests
            }
        }
    }

    fn index(self) -> usize {
        Movement::ALL
            .iter()
            .position(|m| *m == self)
            .unwrap_or(Movement::ALL.len() - 1)
    }
}

/// The file's columns.
pub const COLUMNS: &[&str] = &[
    "merchant_id",
    "currency",
    "date",
    "class",
    "opening_minor",
    "loads_sku_minor",
    "loads_settlement_minor",
    "bonuses_minor",
    "redemptions_minor",
    "refunds_minor",
    "voids_minor",
    "reversals_minor",
    "expiries_minor",
    "clawbacks_minor",
    "adjustments_minor",
    "escrow_in_minor",
    "escrow_out_minor",
    "transfers_minor",
    "pending_requests_minor",
    "other_minor",
    "closing_minor",
    "breakage_method",
    "breakage_estimate_minor",
];

/// What to roll forward: the merchants, the business days (both included) and the time
/// zone they are days in.
#[derive(Clone, Debug)]
pub struct Spec {
    pub merchants: Vec<Uuid>,
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub timezone: Tz,
}

/// The first instant of the business day `d` in `tz`: local midnight, or where midnight
/// does not exist (a clock change at midnight) the first local time that does.
pub fn day_start(tz: Tz, d: NaiveDate) -> DateTime<Utc> {
    let midnight = d.and_hms_opt(0, 0, 0).expect("midnight exists");
    (0..=180)
        .find_map(|m| {
            tz.from_local_datetime(&(midnight + chrono::Duration::minutes(m)))
                .earliest()
        })
        .map(|t| t.with_timezone(&Utc))
        // No zone skips three hours: unreachable, and UTC midnight is the sane answer.
        .unwrap_or_else(|| Utc.from_utc_datetime(&midnight))
}

/// Writes the roll-forward's rows: merchant by merchant (in the order given), each
/// currency it ever held value in, day by day, every class. Returns nothing; the writer
/// counts the rows.
pub async fn write<C: ConnectionTrait>(
    c: &C,
    spec: &Spec,
    out: &mut FileWriter<'_>,
) -> Result<(), RunError> {
    let end = day_start(spec.timezone, spec.to.succ_opt().unwrap_or(spec.to));
    let start = day_start(spec.timezone, spec.from);
    for merchant in &spec.merchants {
        // Both ends from the snapshots and a day of entries at most (`liability::balances`).
        let sums = async |until| {
            let lines = liability::balances(
                c,
                std::slice::from_ref(merchant),
                None,
                until,
                Holding::Skipped,
            )
            .await?;
            Ok::<_, RunError>(by_class(lines))
        };
        let expected = sums(Until::Before(end)).await?;
        let mut currencies: Vec<String> = expected.keys().map(|(cur, _)| cur.clone()).collect();
        currencies.sort();
        currencies.dedup();
        if currencies.is_empty() {
            continue;
        }
        let mut balance = sums(Until::Before(start)).await?;
        let moves = Moves::load(c, *merchant, start, end).await?;
        // An estimate shown beside the figures: it never posts and never moves a balance.
        let p = policy::of(c, *merchant)
            .await
            .map_err(|e| RunError::Broken(e.to_string()))?;
        let remote = if p.breakage_method == policy::REMOTE {
            Some(aging::remote_breakage(c, &p, start, end, spec.timezone).await?)
        } else {
            None
        };
        let mut day = spec.from;
        while day <= spec.to {
            let next = day
                .succ_opt()
                .ok_or_else(|| RunError::Broken("date overflow".into()))?;
            let (from, to) = (
                day_start(spec.timezone, day),
                day_start(spec.timezone, next),
            );
            let moved = moves.between(c, from, to).await?;
            for currency in &currencies {
                for class in ValueClass::ALL {
                    let mut columns = [0i64; Movement::ALL.len()];
                    for m in moved.iter().filter(|m| {
                        &m.currency == currency
                            && ValueClass::of_kind(&m.account_kind) == Some(class)
                    }) {
                        let column = PostingKind::parse(&m.posting_kind)
                            .map_or(Movement::Other, Movement::of);
                        columns[column.index()] += m.amount_minor;
                    }
                    let key = (currency.clone(), class);
                    let opening = balance.get(&key).copied().unwrap_or(0);
                    let closing = opening + columns.iter().sum::<i64>();
                    let breakage = if class == ValueClass::Actual {
                        let net_redeemed = -(columns[Movement::Redemptions.index()]
                            + columns[Movement::Refunds.index()]
                            + columns[Movement::Voids.index()]);
                        aging::breakage_for_day(&p, net_redeemed, remote.as_ref(), currency, day)
                    } else {
                        0
                    };
                    let mut cells = vec![
                        Cell::Text(merchant.to_string()),
                        Cell::Text(currency.clone()),
                        Cell::Text(day.to_string()),
                        Cell::Text(class.as_str().to_string()),
                        Cell::Int(opening),
                    ];
                    cells.extend(columns.iter().map(|v| Cell::Int(*v)));
                    cells.push(Cell::Int(closing));
                    cells.push(Cell::Text(p.breakage_method.clone()));
                    cells.push(Cell::Int(breakage));
                    out.row(&cells).await?;
                    balance.insert(key, closing);
                }
            }
            day = next;
        }
        for currency in &currencies {
            for class in ValueClass::ALL {
                let key = (currency.clone(), class);
                let rolled = balance.get(&key).copied().unwrap_or(0);
                let ledger = expected.get(&key).copied().unwrap_or(0);
                if rolled != ledger {
                    return Err(RunError::Broken(format!(
                        "the roll-forward of merchant {merchant} {currency} {} closes at {rolled}, the ledger at {ledger}",
                        class.as_str()
                    )));
                }
            }
        }
    }
    Ok(())
}

fn by_class(lines: Vec<Liability>) -> HashMap<(String, ValueClass), i64> {
    let mut out = HashMap::new();
    for l in lines {
        for class in ValueClass::ALL {
            out.insert((l.currency.clone(), class), l.class_minor(class));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_posting_kind_has_its_column_and_other_is_last() {
        for k in PostingKind::ALL {
            assert_ne!(Movement::of(k), Movement::Other, "{k:?}");
        }
        assert_eq!(Movement::Other.index(), Movement::ALL.len() - 1);
        assert_eq!(COLUMNS.len(), 4 + 1 + Movement::ALL.len() + 1 + 2);
    }

    #[test]
    fn a_business_day_starts_at_local_midnight_even_across_a_clock_change() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let d = NaiveDate::from_ymd_opt(2026, 3, 29).unwrap();
        assert_eq!(
            day_start(berlin, d).to_rfc3339(),
            "2026-03-28T23:00:00+00:00"
        );
        let next = NaiveDate::from_ymd_opt(2026, 3, 30).unwrap();
        // The day the clocks went forward had 23 hours.
        assert_eq!(
            (day_start(berlin, next) - day_start(berlin, d)).num_hours(),
            23
        );
        // Havana's clocks jump from 00:00 to 01:00: the day starts at 01:00 local.
        let havana: Tz = "America/Havana".parse().unwrap();
        let jump = NaiveDate::from_ymd_opt(2026, 3, 8).unwrap();
        assert_eq!(
            day_start(havana, jump).to_rfc3339(),
            "2026-03-08T05:00:00+00:00"
        );
        let kathmandu: Tz = "Asia/Kathmandu".parse().unwrap();
        assert_eq!(
            day_start(kathmandu, d).to_rfc3339(),
            "2026-03-28T18:15:00+00:00"
        );
    }
}
