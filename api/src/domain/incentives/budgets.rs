//! Campaign budget envelopes: a cap on the promotional credit a campaign's accruals may
//! issue in total. Every change bumps the budget's `version`.
//!
//! An accrual takes from the budget with one guarded update (`spent + x <= limit`): the
//! database queues concurrent writers on the row and re-checks the guard for each against
//! the committed figures, so concurrent accruals never overspend and never fail for having
//! lost a race. A partner's own change is a compare-and-swap on the `version` it read
//! (`expected_version`): when another change (an accrual included) landed in between, it
//! gets CONFLICT and re-reads instead of overwriting.
//!
//! Lock order: the budget row is always taken last, after the wallet.
use chrono::{DateTime, Utc};
use entities::budget;
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::{error::ApiError, store};

/// Rounds before a writer gives up (each lost round means another writer committed, so
/// this only runs out under extreme contention).
const MAX_ROUNDS: usize = 64;

pub struct NewBudget {
    pub name: String,
    pub currency: String,
    pub limit_minor: i64,
}

/// A budget as partners read it: the domain's read model, so the HTTP edge names no table.
#[derive(Clone, Debug)]
pub struct Budget {
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub name: String,
    pub currency: String,
    pub limit_minor: i64,
    /// Promotional credit its accruals issued (reversed cashback comes back).
    pub spent_minor: i64,
    /// What it can still issue: never below zero, though a resize may leave the limit
    /// under what was spent.
    pub remaining_minor: i64,
    pub active: bool,
    /// Changes with every update and accrual: the compare-and-swap token.
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<budget::Model> for Budget {
    fn from(b: budget::Model) -> Self {
        Budget {
            id: b.id,
            merchant_id: b.merchant_id,
            remaining_minor: (b.limit_minor - b.spent_minor).max(0),
            name: b.name,
            currency: b.currency,
            limit_minor: b.limit_minor,
            spent_minor: b.spent_minor,
            active: b.active,
            version: b.version,
            created_at: b.created_at,
            updated_at: b.updated_at,
        }
    }
}

pub async fn create<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Uuid,
    b: NewBudget,
    now: DateTime<Utc>,
) -> Result<Budget, ApiError> {
    crate::domain::platform::currencies::require_currency(c, merchant, &b.currency).await?;
    Ok(store::incentives::insert_budget(
        c,
        budget::Model {
            id: Uuid::now_v7(),
            merchant_id: merchant,
            integration_id,
            name: b.name,
            currency: b.currency,
            limit_minor: b.limit_minor,
            spent_minor: 0,
            active: true,
            version: 1,
            created_at: now,
            updated_at: now,
        },
    )
    .await?
    .into())
}

pub async fn get<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    id: Uuid,
) -> Result<budget::Model, ApiError> {
    store::incentives::find_budget(c, merchant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Budget"))
}

/// The merchant's budget `id`, as partners read it.
pub async fn show<C: ConnectionTrait>(c: &C, merchant: Uuid, id: Uuid) -> Result<Budget, ApiError> {
    get(c, merchant, id).await.map(Budget::from)
}

/// A page of the merchant's budgets, oldest first.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    after: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<Budget>, bool), ApiError> {
    let rows = store::incentives::budgets_page(c, merchant, after, limit + 1).await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    Ok((rows.into_iter().map(Budget::from).collect(), more))
}

/// A change of a budget's terms; `None` keeps the current value.
#[derive(Clone, Debug, Default)]
pub struct Change {
    pub name: Option<String>,
    pub limit_minor: Option<i64>,
    pub active: Option<bool>,
    /// The version the partner read. Stale → CONFLICT; absent → applied to the current one.
    pub expected_version: Option<i32>,
}

fn stale(current: &budget::Model) -> ApiError {
    ApiError::conflict("The budget changed since you read it; re-read it and retry.").with_details(
        json!({
            "current_version": current.version,
            "spent_minor": current.spent_minor,
            "limit_minor": current.limit_minor,
        }),
    )
}

pub async fn change<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    id: Uuid,
    ch: Change,
    now: DateTime<Utc>,
) -> Result<Budget, ApiError> {
    for _ in 0..MAX_ROUNDS {
        let b = get(c, merchant, id).await?;
        if ch.expected_version.is_some_and(|v| v != b.version) {
            return Err(stale(&b));
        }
        let limit = ch.limit_minor.unwrap_or(b.limit_minor);
        if limit < b.spent_minor {
            return Err(ApiError::field(
                "/limit_minor",
                "below_spent",
                format!(
                    "must cover what the budget already spent, {}",
                    b.spent_minor
                ),
            ));
        }
        let name = ch.name.clone().unwrap_or_else(|| b.name.clone());
        let active = ch.active.unwrap_or(b.active);
        if store::incentives::cas_terms(c, id, b.version, &name, limit, active, now).await? {
            return show(c, merchant, id).await;
        }
        if ch.expected_version.is_some() {
            // Someone else's change (an accrual, say) landed between our read and write.
            let now_b = get(c, merchant, id).await?;
            return Err(stale(&now_b));
        }
    }
    Err(ApiError::conflict(
        "The budget is changing too fast to update; retry.",
    ))
}

/// How an accrual takes from a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// All of it or nothing (an offer promises its reward).
    Exactly,
    /// As much as is left, up to the amount (cashback and reload bonuses shrink to fit).
    UpTo,
}

/// Takes `want` (>= 0) from the budget for an accrual and returns what it got: never more
/// than the limit leaves, whatever runs at the same time. An inactive budget gives nothing.
pub async fn spend<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    id: Uuid,
    want: i64,
    take: Take,
    now: DateTime<Utc>,
) -> Result<i64, ApiError> {
    if want <= 0 {
        return Ok(0);
    }
    get(c, merchant, id).await?;
    let mut ask = want;
    for _ in 0..MAX_ROUNDS {
        if store::incentives::guarded_spend(c, id, ask, now).await? {
            return Ok(ask);
        }
        if take == Take::Exactly {
            return Ok(0);
        }
        // Less is left than asked: ask for what is left now (others may take it first).
        let b = get(c, merchant, id).await?;
        ask = if b.active {
            want.min(b.limit_minor - b.spent_minor)
        } else {
            0
        };
        if ask <= 0 {
            return Ok(0);
        }
    }
    // Only reachable while other accruals keep draining the budget: it is as good as spent.
    Ok(0)
}

/// Gives `amount` back to the budget (a reversed accrual), never below zero spent.
pub async fn give_back<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    id: Uuid,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    if amount <= 0 {
        return Ok(());
    }
    for _ in 0..MAX_ROUNDS {
        let Some(b) = store::incentives::find_budget(c, merchant, id).await? else {
            return Ok(());
        };
        let back = amount.min(b.spent_minor);
        if back == 0 || store::incentives::guarded_spend(c, id, -back, now).await? {
            return Ok(());
        }
    }
    Ok(())
}
