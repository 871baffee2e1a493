//! Velocity limits a merchant sets, separately for its sandbox and its live payments
//! (`GET/PUT /v1/risk/limits`): per wallet, the number and sum of payments over a trailing
//! 24 hours and 7 days; per terminal, the sum of payments over the last hour; the largest
//! single payment; per wallet, the sum of top-ups over a trailing 24 hours.
//!
//! They are checked inside the payment's (or top-up's) own transaction, under the wallet's
//! lock (the per-terminal sum under its terminal's row lock too), so concurrent payments are
//! counted one after another and can never together pass a limit.
//!
//! A payment over the largest single payment is VALIDATION_ERROR on `/amount_minor` (no
//! wait makes it pass). A payment that a window's limit refuses is RATE_LIMITED with
//! `Retry-After` (when enough of the window has passed for it) and `details.limit` naming
//! the rule, its window, the limit, what is used and what remains. A refusal changes
//! nothing, and the first refusal of a window is a crossing (`risk.limit_reached`).
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use entities::risk_limits;
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Scope, crossings};
use crate::domain::credentials::{Principal, scope::Acting};
use crate::domain::validate::Errors;
use crate::error::{ApiError, RateLimitInfo};
use crate::store;

/// The most a limit may be (no amount or count in minor units comes near it).
pub const MAX_LIMIT: i64 = 1_000_000_000_000_000;

/// A merchant's limits for one mode; `None`: no limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub wallet_payments_24h_count: Option<i64>,
    pub wallet_payments_24h_minor: Option<i64>,
    pub wallet_payments_7d_count: Option<i64>,
    pub wallet_payments_7d_minor: Option<i64>,
    pub terminal_payments_1h_minor: Option<i64>,
    pub payment_max_minor: Option<i64>,
    pub wallet_topups_24h_minor: Option<i64>,
}

/// The limits as set, with when and by whom (`None` for a merchant that never set any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    pub merchant_id: Uuid,
    pub is_sandbox: bool,
    pub limits: Limits,
    pub updated_at: Option<DateTime<Utc>>,
    pub updated_by: Option<String>,
}

impl From<&risk_limits::Model> for Limits {
    fn from(m: &risk_limits::Model) -> Self {
        Limits {
            wallet_payments_24h_count: m.wallet_payments_24h_count,
            wallet_payments_24h_minor: m.wallet_payments_24h_minor,
            wallet_payments_7d_count: m.wallet_payments_7d_count,
            wallet_payments_7d_minor: m.wallet_payments_7d_minor,
            terminal_payments_1h_minor: m.terminal_payments_1h_minor,
            payment_max_minor: m.payment_max_minor,
            wallet_topups_24h_minor: m.wallet_topups_24h_minor,
        }
    }
}

impl Limits {
    /// Each limit with its field name, for checking and showing.
    pub fn fields(&self) -> [(&'static str, Option<i64>); 7] {
        [
            ("wallet_payments_24h_count", self.wallet_payments_24h_count),
            ("wallet_payments_24h_minor", self.wallet_payments_24h_minor),
            ("wallet_payments_7d_count", self.wallet_payments_7d_count),
            ("wallet_payments_7d_minor", self.wallet_payments_7d_minor),
            (
                "terminal_payments_1h_minor",
                self.terminal_payments_1h_minor,
            ),
            ("payment_max_minor", self.payment_max_minor),
            ("wallet_topups_24h_minor", self.wallet_topups_24h_minor),
        ]
    }
}

/// Checks limits as asked (field names are JSON pointers into the request body, under
/// `at`).
pub fn check(e: &mut Errors, at: &str, l: &Limits) {
    for (name, v) in l.fields() {
        if let Some(v) = v
            && !(1..=MAX_LIMIT).contains(&v)
        {
            e.push(
                format!("{at}/{name}"),
                "out_of_range",
                format!("must be between 1 and {MAX_LIMIT}, or null for no limit"),
            );
        }
    }
}

/// The merchant's limits for one mode (none set: no limits).
pub async fn of<C: ConnectionTrait>(c: &C, merchant: Uuid, sandbox: bool) -> Result<Set, ApiError> {
    Ok(
        match store::payments::risk::find_limits(c, merchant, sandbox).await? {
            Some(m) => Set {
                merchant_id: merchant,
                is_sandbox: sandbox,
                limits: Limits::from(&m),
                updated_at: Some(m.updated_at),
                updated_by: Some(m.updated_by),
            },
            None => Set {
                merchant_id: merchant,
                is_sandbox: sandbox,
                limits: Limits::default(),
                updated_at: None,
                updated_by: None,
            },
        },
    )
}

/// Sets the limits of the acting merchant for the caller's mode, audited with the key.
pub async fn set<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    acting: &Acting,
    l: &Limits,
    now: DateTime<Utc>,
) -> Result<Set, ApiError> {
    let actor = p.actor();
    store::payments::risk::put_limits(
        c,
        risk_limits::Model {
            merchant_id: acting.merchant_id,
            is_sandbox: acting.is_sandbox,
            wallet_payments_24h_count: l.wallet_payments_24h_count,
            wallet_payments_24h_minor: l.wallet_payments_24h_minor,
            wallet_payments_7d_count: l.wallet_payments_7d_count,
            wallet_payments_7d_minor: l.wallet_payments_7d_minor,
            terminal_payments_1h_minor: l.terminal_payments_1h_minor,
            payment_max_minor: l.payment_max_minor,
            wallet_topups_24h_minor: l.wallet_topups_24h_minor,
            updated_at: now,
            updated_by: actor.clone(),
        },
    )
    .await?;
    let shown: serde_json::Map<String, Value> = l
        .fields()
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    crate::domain::operators::audit(
        c,
        &actor,
        "risk_limits.set",
        "merchant",
        Some(acting.merchant_id.to_string()),
        None,
        json!({"sandbox": acting.is_sandbox, "limits": shown}),
    )
    .await?;
    Ok(Set {
        merchant_id: acting.merchant_id,
        is_sandbox: acting.is_sandbox,
        limits: l.clone(),
        updated_at: Some(now),
        updated_by: Some(actor),
    })
}

/// A window rule: what it counts, over how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Measure {
    Count,
    Minor,
}

struct Rule {
    name: &'static str,
    scope: Scope,
    window: Duration,
    measure: Measure,
    limit: i64,
}

/// The window rules: name (a `Limits` field), what it is counted for, its window in hours,
/// and what it counts.
const WINDOWS: [(&str, Scope, i64, Measure); 6] = [
    (
        "wallet_payments_24h_count",
        Scope::Wallet,
        24,
        Measure::Count,
    ),
    (
        "wallet_payments_24h_minor",
        Scope::Wallet,
        24,
        Measure::Minor,
    ),
    (
        "wallet_payments_7d_count",
        Scope::Wallet,
        7 * 24,
        Measure::Count,
    ),
    (
        "wallet_payments_7d_minor",
        Scope::Wallet,
        7 * 24,
        Measure::Minor,
    ),
    (
        "terminal_payments_1h_minor",
        Scope::Terminal,
        1,
        Measure::Minor,
    ),
    ("wallet_topups_24h_minor", Scope::Wallet, 24, Measure::Minor),
];

impl Rule {
    /// The window rule `name` with the merchant's limit for it, if it set one.
    fn of(limits: &Limits, name: &str) -> Option<Rule> {
        let &(name, scope, hours, measure) = WINDOWS.iter().find(|w| w.0 == name)?;
        let (_, limit) = limits.fields().into_iter().find(|(n, _)| *n == name)?;
        Some(Rule {
            name,
            scope,
            window: Duration::hours(hours),
            measure,
            limit: limit?,
        })
    }
}

/// One earlier movement in a window: when, and how much.
pub type Movement = (DateTime<Utc>, i64);

/// Whether `rule` lets `amount` through given the window's earlier `movements` (oldest
/// first); if not, the refusal, with when it would.
fn judge(
    rule: &Rule,
    movements: &[Movement],
    amount: i64,
    now: DateTime<Utc>,
    subject: Value,
) -> Result<(), ApiError> {
    let weight = |a: i64| match rule.measure {
        Measure::Count => 1,
        Measure::Minor => a,
    };
    let used: i64 = movements.iter().map(|(_, a)| weight(*a)).sum();
    if used + weight(amount) <= rule.limit {
        return Ok(());
    }
    // The earliest moment enough of the window has aged out for this one to fit.
    let mut rest = used;
    let mut free_at = now + rule.window;
    for (at, a) in movements {
        rest -= weight(*a);
        if rest + weight(amount) <= rule.limit {
            free_at = *at + rule.window;
            break;
        }
    }
    let wait = (free_at - now).num_seconds().max(1) as u64;
    let remaining = (rule.limit - used).max(0);
    let mut limit = json!({
        "rule": rule.name,
        "scope": rule.scope.as_str(),
        "window_seconds": rule.window.num_seconds(),
        "limit": rule.limit,
        "used": used,
        "remaining": remaining,
    });
    if let (Some(l), Some(s)) = (limit.as_object_mut(), subject.as_object()) {
        l.extend(s.clone());
    }
    let info = RateLimitInfo {
        limit: rule.limit as u64,
        remaining: remaining as u64,
        reset_secs: wait,
        window_secs: rule.window.num_seconds() as u64,
    };
    Err(ApiError::rate_limited(info, wait)
        .with_message(format!(
            "The merchant's limit {} would be passed; retry after the Retry-After seconds or with a smaller amount.",
            rule.name
        ))
        .with_details(json!({
            "scope": rule.scope.as_str(),
            "limit": limit,
            "retry_after_seconds": wait,
        })))
}

/// The largest single payment (or top-up credit).
fn single(limits: &Limits, amount: i64) -> Result<(), ApiError> {
    match limits.payment_max_minor {
        Some(max) if amount > max => Err(ApiError::field(
            "/amount_minor",
            "over_limit",
            format!("is over the merchant's largest single payment ({max})"),
        )
        .with_detail(
            "limit",
            json!({"rule": "payment_max_minor", "scope": "payment", "limit": max,
                   "used": 0, "remaining": max}),
        )),
        _ => Ok(()),
    }
}

/// Checks a payment of `amount` from `wallet` at the acting terminal against the
/// merchant's limits, in the payment's transaction with the wallet locked. Takes the
/// terminal's row lock when the merchant limits terminals, and counts the payment there.
pub async fn check_payment<C: ConnectionTrait>(
    c: &C,
    acting: &Acting,
    wallet: Uuid,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let Some(limits) =
        store::payments::risk::find_limits(c, acting.merchant_id, acting.is_sandbox).await?
    else {
        return Ok(());
    };
    let limits = Limits::from(&limits);
    single(&limits, amount)?;
    let wallet_rules: Vec<Rule> = WINDOWS
        .iter()
        .filter(|w| w.0.starts_with("wallet_payments_"))
        .filter_map(|w| Rule::of(&limits, w.0))
        .collect();
    if let Some(longest) = wallet_rules.iter().map(|r| r.window).max() {
        let movements =
            store::payments::risk::wallet_payments_since(c, wallet, now - longest, now).await?;
        for r in &wallet_rules {
            let since = now - r.window;
            let within: Vec<Movement> = movements
                .iter()
                .copied()
                .filter(|(at, _)| *at > since)
                .collect();
            judge(
                r,
                &within,
                amount,
                now,
                json!({"wallet_id": wallet.to_string()}),
            )?;
        }
    }
    if let Some(rule) = Rule::of(&limits, "terminal_payments_1h_minor") {
        terminal_hour(c, acting, &rule, amount, now).await?;
    }
    Ok(())
}

/// The terminal's last hour, by minute, under its row lock; the payment is added to it
/// when it fits.
async fn terminal_hour<C: ConnectionTrait>(
    c: &C,
    acting: &Acting,
    rule: &Rule,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let mut usage = store::payments::risk::lock_terminal_usage(
        c,
        acting.merchant_id,
        acting.is_sandbox,
        &acting.counted_terminal,
        now,
    )
    .await?;
    let minute = now.timestamp().div_euclid(60);
    let mut minutes: BTreeMap<i64, i64> = serde_json::from_str(&usage.minutes).unwrap_or_default();
    // The last hour: this minute and the 59 before it.
    minutes.retain(|m, _| *m > minute - 60);
    let movements: Vec<Movement> = minutes
        .iter()
        .filter_map(|(m, a)| Some((DateTime::from_timestamp(m * 60, 0)?, *a)))
        .collect();
    judge(
        rule,
        &movements,
        amount,
        now,
        crossings::subject_view("terminal", &acting.counted_terminal),
    )?;
    *minutes.entry(minute).or_default() += amount;
    usage.minutes = serde_json::to_string(&minutes).map_err(ApiError::internal)?;
    usage.updated_at = now;
    store::payments::risk::save_terminal_usage(c, usage).await?;
    Ok(())
}

/// Checks a top-up crediting `amount` to `wallet` (locked, in the top-up's transaction)
/// against the merchant's per-wallet daily top-up limit.
pub async fn check_topup<C: ConnectionTrait>(
    c: &C,
    (merchant, sandbox): (Uuid, bool),
    wallet: Uuid,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let Some(rule) = store::payments::risk::find_limits(c, merchant, sandbox)
        .await?
        .and_then(|l| Rule::of(&Limits::from(&l), "wallet_topups_24h_minor"))
    else {
        return Ok(());
    };
    let movements =
        store::payments::risk::wallet_topups_since(c, wallet, now - rule.window, now).await?;
    judge(
        &rule,
        &movements,
        amount,
        now,
        json!({"wallet_id": wallet.to_string()}),
    )
}

/// The crossing a window limit's refusal `e` of a caller at `acting` stands for, if it is
/// one (read back from the refusal's own details, which `judge` wrote).
pub fn crossing_of(
    e: &ApiError,
    merchant: Uuid,
    sandbox: bool,
    terminal: &str,
) -> Option<crossings::Crossing> {
    let d = e.details()?;
    let l = d.get("limit")?;
    let named = l.get("rule")?.as_str()?;
    let rule = WINDOWS.iter().map(|w| w.0).find(|r| *r == named)?;
    let scope = Scope::parse(l.get("scope")?.as_str()?)?;
    let subject = match scope {
        Scope::Wallet => l.get("wallet_id")?.as_str()?.to_string(),
        Scope::Terminal => terminal.to_string(),
        _ => return None,
    };
    let retry = d.get("retry_after_seconds")?.as_i64()?;
    Some(crossings::Crossing {
        merchant_id: merchant,
        is_sandbox: sandbox,
        scope,
        subject,
        rule,
        threshold: l.get("limit")?.as_i64()?,
        window_secs: l.get("window_seconds")?.as_i64()?,
        observed: l.get("used")?.as_i64()?,
        until: Utc::now() + Duration::seconds(retry),
    })
}

/// After a payment or top-up at `till` was refused with `e`: a window limit's refusal is a
/// crossing, recorded in a transaction of its own (the refused one rolled back).
pub async fn refused(
    db: &crate::store::Db,
    till: &super::failures::Till,
    e: &ApiError,
) -> Result<(), ApiError> {
    match crossing_of(e, till.merchant_id, till.is_sandbox, &till.terminal) {
        Some(x) => crossings::record(db, x, Utc::now()).await,
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(measure: Measure, limit: i64) -> Rule {
        Rule {
            name: "wallet_payments_24h_count",
            scope: Scope::Wallet,
            window: Duration::hours(24),
            measure,
            limit,
        }
    }

    #[test]
    fn a_count_limit_lets_the_nth_payment_through_and_refuses_the_next_until_the_oldest_ages_out() {
        let now = Utc::now();
        let two = vec![
            (now - Duration::hours(20), 5),
            (now - Duration::hours(1), 5),
        ];
        assert!(judge(&rule(Measure::Count, 3), &two, 1, now, json!({})).is_ok());
        let three = [two.clone(), vec![(now - Duration::minutes(5), 5)]].concat();
        let e = judge(&rule(Measure::Count, 3), &three, 1, now, json!({})).unwrap_err();
        // The oldest leaves the window in four hours.
        let d = e.details().unwrap();
        assert_eq!(d["retry_after_seconds"], 4 * 3600);
        assert_eq!(d["limit"]["remaining"], 0);
        assert_eq!(d["limit"]["used"], 3);
    }

    #[test]
    fn a_sum_limit_waits_for_as_much_of_the_window_as_the_amount_needs() {
        let now = Utc::now();
        let spent = vec![
            (now - Duration::hours(23), 400),
            (now - Duration::hours(10), 300),
            (now - Duration::hours(2), 200),
        ];
        // 900 of 1000 used: 100 fits, 101 does not.
        assert!(judge(&rule(Measure::Minor, 1000), &spent, 100, now, json!({})).is_ok());
        let e = judge(&rule(Measure::Minor, 1000), &spent, 500, now, json!({})).unwrap_err();
        // 500 fits once the 400 (in 1 h) has left: 500 + 500 = 1000.
        assert_eq!(e.details().unwrap()["retry_after_seconds"], 3600);
        assert_eq!(e.details().unwrap()["limit"]["remaining"], 100);
    }
}
