//! How old the stored value is: each wallet's actual money against the days since its last
//! customer-initiated movement (a payment, a top-up, a top-up requested; a wallet that never
//! had one counts from its first movement). `liability_aging` buckets it; `dormant_wallets`
//! lists the wallets past the merchant's dormancy period, for unclaimed-property filings;
//! and the `remote` breakage method recognises a wallet's actual money the day it becomes
//! dormant. All from the ledger alone, a page of wallets at a time.
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use chrono_tz::Tz;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::ledger::policy::{self, Policy};
use crate::domain::ledger::posting::PostingKind;
use crate::domain::ledger::reports::error::RunError;
use crate::domain::ledger::reports::file::{Cell, FileWriter};
use crate::store::ledger::balances::{self, WalletActivity};

/// The postings a customer starts: their money moving at their request.
pub const CUSTOMER_INITIATED: [PostingKind; 4] = [
    PostingKind::Payment,
    PostingKind::TopupSku,
    PostingKind::TopupSettlement,
    PostingKind::TopupRequested,
];

/// Wallets read per page.
const PAGE: u64 = 2_000;

/// Aging buckets, in days since the last customer-initiated movement: (label, from, to).
pub const BUCKETS: [(&str, i64, Option<i64>); 7] = [
    ("0-30", 0, Some(30)),
    ("31-90", 31, Some(90)),
    ("91-180", 91, Some(180)),
    ("181-365", 181, Some(365)),
    ("366-730", 366, Some(730)),
    ("731-1095", 731, Some(1095)),
    ("over-1095", 1096, None),
];

pub const AGING_COLUMNS: &[&str] = &[
    "merchant_id",
    "currency",
    "bucket",
    "days_from",
    "days_to",
    "wallets",
    "actual_minor",
];

pub const DORMANT_COLUMNS: &[&str] = &[
    "merchant_id",
    "currency",
    "wallet_id",
    "actual_minor",
    "last_activity_at",
    "days_inactive",
    "dormancy_days",
];

fn bucket_of(days: i64) -> usize {
    BUCKETS
        .iter()
        .position(|(_, from, to)| days >= *from && to.is_none_or(|t| days <= t))
        .unwrap_or(BUCKETS.len() - 1)
}

/// A wallet that had moved before the walk's instant: its actual money then, and when it
/// last moved at its customer's request (else when it first moved).
struct Aged {
    wallet_id: Uuid,
    currency: String,
    actual_minor: i64,
    last_activity: DateTime<Utc>,
}

impl Aged {
    fn of(w: WalletActivity) -> Option<Aged> {
        let last_activity = w.last_customer_at.or(w.first_at)?;
        Some(Aged {
            wallet_id: w.wallet_id,
            currency: w.currency,
            actual_minor: w.actual_minor,
            last_activity,
        })
    }
}

/// Every wallet of a merchant as it stood before an instant, a page at a time, in wallet
/// order.
struct Walk<'c, C> {
    c: &'c C,
    merchant: Uuid,
    before: DateTime<Utc>,
    after: Option<Uuid>,
    done: bool,
}

impl<'c, C: ConnectionTrait> Walk<'c, C> {
    fn new(c: &'c C, merchant: Uuid, before: DateTime<Utc>) -> Self {
        Walk {
            c,
            merchant,
            before,
            after: None,
            done: false,
        }
    }

    /// The next page's wallets that had moved (a page of wallets may have none).
    async fn next_page(&mut self) -> Result<Option<Vec<Aged>>, RunError> {
        if self.done {
            return Ok(None);
        }
        let kinds: Vec<&str> = CUSTOMER_INITIATED.iter().map(|k| k.as_str()).collect();
        let page = balances::wallet_activity_page(
            self.c,
            self.merchant,
            self.before,
            &kinds,
            self.after,
            PAGE,
        )
        .await?;
        self.after = page.last().map(|w| w.wallet_id);
        self.done = (page.len() as u64) < PAGE;
        Ok((!page.is_empty()).then(|| page.into_iter().filter_map(Aged::of).collect()))
    }
}

/// `liability_aging` as of `end` (the end of the as-of day): per merchant and currency, one
/// row per bucket (zeros included) with the wallets holding actual money and how much.
pub async fn write_aging<C: ConnectionTrait>(
    c: &C,
    merchants: &[Uuid],
    end: DateTime<Utc>,
    out: &mut FileWriter<'_>,
) -> Result<(), RunError> {
    for merchant in merchants {
        let mut by_currency: BTreeMap<String, [(i64, i64); BUCKETS.len()]> = BTreeMap::new();
        let mut walk = Walk::new(c, *merchant, end);
        while let Some(page) = walk.next_page().await? {
            for w in page.iter().filter(|w| w.actual_minor > 0) {
                let days = (end - w.last_activity).num_days();
                let b = &mut by_currency
                    .entry(w.currency.clone())
                    .or_insert([(0, 0); BUCKETS.len()])[bucket_of(days)];
                b.0 += 1;
                b.1 += w.actual_minor;
            }
        }
        for (currency, buckets) in by_currency {
            for ((label, from, to), (wallets, actual)) in BUCKETS.iter().zip(buckets) {
                out.row(&[
                    Cell::Text(merchant.to_string()),
                    Cell::Text(currency.clone()),
                    Cell::Text((*label).to_string()),
                    Cell::Int(*from),
                    to.map_or(Cell::Text(String::new()), Cell::Int),
                    Cell::Int(wallets),
                    Cell::Int(actual),
                ])
                .await?;
            }
        }
    }
    Ok(())
}

/// `dormant_wallets` as of `end`: every wallet holding actual money whose last
/// customer-initiated movement is more than its merchant's dormancy period before `end`.
pub async fn write_dormant<C: ConnectionTrait>(
    c: &C,
    merchants: &[Uuid],
    end: DateTime<Utc>,
    out: &mut FileWriter<'_>,
) -> Result<(), RunError> {
    for merchant in merchants {
        let p = policy::of(c, *merchant)
            .await
            .map_err(|e| RunError::Broken(e.to_string()))?;
        let mut walk = Walk::new(c, *merchant, end);
        while let Some(page) = walk.next_page().await? {
            for w in &page {
                let last = w.last_activity;
                let days = (end - last).num_days();
                if w.actual_minor > 0 && days > i64::from(p.dormancy_days) {
                    out.row(&[
                        Cell::Text(merchant.to_string()),
                        Cell::Text(w.currency.clone()),
                        Cell::Text(w.wallet_id.to_string()),
                        Cell::Int(w.actual_minor),
                        Cell::Text(last.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
                        Cell::Int(days),
                        Cell::Int(i64::from(p.dormancy_days)),
                    ])
                    .await?;
                }
            }
        }
    }
    Ok(())
}

/// The `remote` method's breakage per currency and business day of `[start, end)`: each
/// wallet still dormant at `end` whose dormancy began in the range recognises the actual
/// money it held at that instant, on that day (in `tz`).
pub async fn remote_breakage<C: ConnectionTrait>(
    c: &C,
    p: &Policy,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    tz: Tz,
) -> Result<BTreeMap<(String, NaiveDate), i64>, RunError> {
    let dormancy = Duration::days(i64::from(p.dormancy_days));
    let mut crossing: Vec<(Uuid, String, DateTime<Utc>)> = Vec::new();
    let mut walk = Walk::new(c, p.merchant_id, end);
    while let Some(page) = walk.next_page().await? {
        for w in &page {
            let at = w.last_activity + dormancy;
            if at >= start && at < end {
                crossing.push((w.wallet_id, w.currency.clone(), at));
            }
        }
    }
    let mut out = BTreeMap::new();
    for batch in crossing.chunks(500) {
        let ids: Vec<Uuid> = batch.iter().map(|(w, _, _)| *w).collect();
        // One pass over the batch's entries: each wallet's money up to its own instant.
        let until: std::collections::HashMap<Uuid, DateTime<Utc>> =
            batch.iter().map(|(w, _, at)| (*w, *at)).collect();
        let mut held_by: std::collections::HashMap<Uuid, i64> = std::collections::HashMap::new();
        for e in balances::actual_entries(c, &ids, end).await? {
            if until
                .get(&e.wallet_id)
                .is_some_and(|at| e.created_at <= *at)
            {
                *held_by.entry(e.wallet_id).or_insert(0) += e.amount_minor;
            }
        }
        for (wallet, currency, at) in batch {
            let held = held_by.get(wallet).copied().unwrap_or(0);
            if held > 0 {
                let day = at.with_timezone(&tz).date_naive();
                *out.entry((currency.clone(), day)).or_insert(0) += held;
            }
        }
    }
    Ok(out)
}

/// The breakage a policy recognises on one `actual` row: proportional to the day's net
/// redemptions, or what `remote` found for that day.
pub fn breakage_for_day(
    p: &Policy,
    net_redeemed: i64,
    remote: Option<&BTreeMap<(String, NaiveDate), i64>>,
    currency: &str,
    day: NaiveDate,
) -> i64 {
    if p.breakage_method == policy::REMOTE {
        remote
            .and_then(|r| r.get(&(currency.to_string(), day)))
            .copied()
            .unwrap_or(0)
    } else {
        p.proportional_breakage(net_redeemed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_day_count_falls_in_exactly_one_bucket() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(30), 0);
        assert_eq!(bucket_of(31), 1);
        assert_eq!(bucket_of(365), 3);
        assert_eq!(bucket_of(1095), 5);
        assert_eq!(bucket_of(1096), 6);
        assert_eq!(bucket_of(40_000), 6);
    }
}
