//! Settlement-backed top-ups. The partner's control plane reports what its payment
//! provider settled (PENDING → SETTLED or FAILED); the till then confirms a top-up against
//! one SETTLED reference, which credits the customer's actual money once and accrues the
//! reload bonus in force at that moment, in one transaction.
//!
//! The till may also confirm before the provider settles: against a PENDING reference the
//! top-up is requested, not credited. The wallet shows it in `pending_topups_minor`; the
//! ingest that reports the reference SETTLED credits it (with the reload bonus in force
//! then) and the one that reports it FAILED drops it, each in the ingest's transaction.
//!
//! The service never calls a provider itself: references come only from ingest. A sandbox
//! key's references are sandbox references, and a production key never confirms against
//! one (nor a sandbox key against a production one).
mod confirm;

pub use confirm::*;

use chrono::{DateTime, Duration, Utc};
use entities::{reload_bonus_config, settlement, wallet_program};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::{
    credentials::scope::Acting,
    incentives::reload_bonus,
    outbox::events::{NewOutbox, OutboxKind},
    topups::{self, BonusGrant},
};
use crate::{error::ApiError, store};

pub use entities::settlement::SettlementState;
pub const PENDING: SettlementState = SettlementState::Pending;
pub const SETTLED: SettlementState = SettlementState::Settled;
pub const FAILED: SettlementState = SettlementState::Failed;
/// The states a report may name, as the contract spells them.
pub const STATES: &[&str] = &["PENDING", "SETTLED", "FAILED"];

/// A reported state, if it is one.
pub fn parse_state(s: &str) -> Option<SettlementState> {
    SettlementState::parse(s)
}

/// A settlement reference and what became of it, as the partner reads it: the domain's
/// read model, so the HTTP edge names no table.
#[derive(Clone, Debug)]
pub struct Settlement {
    pub id: Uuid,
    pub merchant_id: Uuid,
    /// The provider's reference, unique per merchant.
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub state: SettlementState,
    pub provider: Option<String>,
    pub failure_reason: Option<String>,
    /// Whether a top-up used it (a reference credits once).
    pub used: bool,
    /// The top-up that used it.
    pub topup_id: Option<Uuid>,
    pub is_sandbox: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<settlement::Model> for Settlement {
    fn from(s: settlement::Model) -> Self {
        Settlement {
            id: s.id,
            merchant_id: s.merchant_id,
            reference: s.reference,
            amount_minor: s.amount_minor,
            currency: s.currency,
            state: s.state,
            provider: s.provider,
            failure_reason: s.failure_reason,
            used: s.topup_id.is_some(),
            topup_id: s.topup_id,
            is_sandbox: s.is_sandbox,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// The merchant's settlement `reference` in the integration, or NOT_FOUND.
pub async fn show<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Uuid,
    reference: &str,
) -> Result<Settlement, ApiError> {
    store::incentives::find_settlement(c, integration_id, merchant, reference)
        .await?
        .map(Settlement::from)
        .ok_or_else(|| ApiError::not_found("Settlement"))
}

#[derive(Clone, Debug)]
pub struct Report {
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub state: String,
    pub provider: Option<String>,
    pub failure_reason: Option<String>,
}

fn event(
    topic: &str,
    s: &settlement::Model,
    extra: serde_json::Value,
    now: DateTime<Utc>,
) -> NewOutbox {
    let mut data = json!({
        "settlement_reference": s.reference,
        "settlement_state": s.state.as_str(),
        "amount_minor": s.amount_minor,
        "currency": s.currency,
    });
    if let (Some(d), Some(x)) = (data.as_object_mut(), extra.as_object()) {
        d.extend(x.clone());
    }
    NewOutbox {
        kind: OutboxKind::Event,
        topic: topic.into(),
        merchant_id: Some(s.merchant_id),
        // One resource per reference, so topup.requested orders before its outcome.
        resource_type: "settlement".into(),
        resource_id: s.id.to_string(),
        payload: data,
        occurred_at: now,
    }
}

/// Settlement ingest: records a reference or moves it on (PENDING → SETTLED | FAILED).
/// Reporting the same state again changes nothing; a reference's amount and currency never
/// change. The first report fires topup.requested, a failure topup.failed.
pub async fn ingest<C: ConnectionTrait>(
    c: &C,
    acting: &Acting,
    proof_window: Duration,
    r: Report,
    now: DateTime<Utc>,
) -> Result<Settlement, ApiError> {
    let merchant = acting.merchant_id;
    let state = parse_state(&r.state)
        .ok_or_else(|| ApiError::field("/state", "invalid", "PENDING, SETTLED or FAILED"))?;
    crate::domain::platform::currencies::require_currency(c, merchant, &r.currency).await?;
    let fresh = settlement::Model {
        id: Uuid::now_v7(),
        merchant_id: merchant,
        integration_id: acting.integration_id,
        reference: r.reference.clone(),
        amount_minor: r.amount_minor,
        currency: r.currency.clone(),
        state,
        provider: r.provider.clone(),
        failure_reason: r.failure_reason.clone(),
        is_sandbox: acting.is_sandbox,
        topup_id: None,
        created_at: now,
        updated_at: now,
    };
    if store::incentives::insert_settlement_if_absent(c, fresh.clone()).await? {
        let mut events = vec![event("topup.requested", &fresh, json!({}), now)];
        if fresh.state == FAILED {
            events.push(event(
                "topup.failed",
                &fresh,
                json!({"failure_reason": fresh.failure_reason}),
                now,
            ));
        }
        store::outbox::append_all(c, events).await?;
        return Ok(fresh.into());
    }
    let mut s =
        store::incentives::lock_settlement(c, acting.integration_id, merchant, &r.reference)
            .await?
            .ok_or_else(|| ApiError::not_found("Settlement"))?;
    if s.amount_minor != r.amount_minor || s.currency != r.currency {
        return Err(ApiError::field(
            "/reference",
            "already_reported",
            format!(
                "was reported as {} {}; a reference's amount and currency never change",
                s.amount_minor, s.currency
            ),
        ));
    }
    if s.state == state {
        return Ok(s.into());
    }
    if s.state != PENDING {
        return Err(ApiError::field(
            "/state",
            "invalid_transition",
            format!(
                "the reference is {} already and cannot become {}",
                s.state, state
            ),
        ));
    }
    s.state = state;
    s.provider = r.provider.or(s.provider);
    s.failure_reason = r.failure_reason;
    s.updated_at = now;
    let s = store::incentives::update_settlement(c, s).await?;
    // A top-up requested while the reference was PENDING settles with it.
    let requested = match s.topup_id {
        Some(id) => store::topups::find(c, id)
            .await?
            .filter(|t| t.status == topups::PENDING),
        None => None,
    };
    let mut events = Vec::new();
    if s.state == FAILED {
        let mut extra = json!({"failure_reason": s.failure_reason});
        if let Some(t) = requested {
            extra["topup_id"] = json!(t.id.to_string());
            extra["wallet_id"] = json!(t.wallet_id.to_string());
            events.extend(drop_requested(c, &s, t, now).await?);
        }
        events.insert(0, event("topup.failed", &s, extra, now));
    } else if let Some(t) = requested {
        events.extend(credit_requested(c, proof_window, &s, t, now).await?);
    }
    store::outbox::append_all(c, events).await?;
    Ok(s.into())
}

/// The reload bonus a credit of `amount` to `program` accrues under the config in force
/// now, and that config.
async fn reload_bonus_for<C: ConnectionTrait>(
    c: &C,
    program: &wallet_program::Model,
    amount: i64,
    field: &'static str,
    now: DateTime<Utc>,
) -> Result<(Option<BonusGrant>, Option<reload_bonus_config::Model>), ApiError> {
    let config = store::incentives::current_reload_config(c, program.id).await?;
    let bonus = match &config {
        Some(cfg) => {
            let tiers = reload_bonus::tiers_of(cfg);
            let value = match reload_bonus::tier_for(&tiers, amount).and_then(|t| t.bonus()) {
                Some(b) => b.amount(1, amount).ok_or_else(|| {
                    ApiError::field(
                        field,
                        "too_large",
                        "its reload bonus would exceed the largest amount",
                    )
                })?,
                None => 0,
            };
            let days = cfg.expiry_days.unwrap_or(reload_bonus::DEFAULT_EXPIRY_DAYS);
            (value > 0).then(|| BonusGrant {
                amount: value,
                source: "RELOAD_BONUS",
                expires_at: now + Duration::days(i64::from(days)),
                budget_id: cfg.budget_id,
            })
        }
        None => None,
    };
    Ok((bonus, config))
}

/// `transaction.settled`: a settlement top-up is credited against a SETTLED reference (by
/// a confirm of a settled reference, or by the ingest that settles a requested top-up).
/// The top-up is the transaction, so the event is in its sequence. Wallet payments have no
/// settlement: a closed-loop debit is final when it completes.
fn settled_event(
    s: &settlement::Model,
    topup_id: Uuid,
    w: &entities::wallet::Model,
    now: DateTime<Utc>,
) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: "transaction.settled".into(),
        merchant_id: Some(s.merchant_id),
        resource_type: "topup".into(),
        resource_id: topup_id.to_string(),
        payload: json!({
            "transaction_id": topup_id.to_string(),
            "type": "topup",
            "settlement_reference": s.reference,
            "provider": s.provider,
            "wallet_id": w.id.to_string(),
            "amount_minor": s.amount_minor,
            "currency": s.currency,
        }),
        occurred_at: now,
    }
}

/// `topup.confirmed` of a settlement top-up.
fn confirmed_event(
    s: &settlement::Model,
    topup_id: Uuid,
    w: &entities::wallet::Model,
    bonus_minor: i64,
    now: DateTime<Utc>,
) -> NewOutbox {
    event(
        "topup.confirmed",
        s,
        json!({
            "topup_id": topup_id.to_string(),
            "kind": "settlement",
            "wallet_id": w.id.to_string(),
            "credited_actual_minor": s.amount_minor,
            "bonus_minor": bonus_minor,
            "currency": w.currency,
        }),
        now,
    )
}
