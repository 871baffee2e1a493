//! Settlement-backed top-ups. The partner's control plane reports what its payment
//! provider settled (PENDING → SETTLED or FAILED); the till then confirms a top-up against
//! one SETTLED reference, which credits the customer's actual money once and accrues the
//! reload bonus in force at that moment, in one transaction.
//!
//! The service never calls a provider itself: references come only from ingest. A sandbox
//! key's references are sandbox references, and a production key never confirms against
//! one (nor a sandbox key against a production one).
use chrono::{DateTime, Duration, Utc};
use entities::{settlement, topup};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use super::{
    customers::{self, IdentityCredential},
    events::{NewOutbox, OutboxKind},
    payments::Caller,
    reload_bonus,
    topups::{self, BonusGrant, Credit, Credited},
    wallets::Balance,
};
use crate::{crypto::Sealer, error::ApiError, store};

pub const PENDING: &str = "PENDING";
pub const SETTLED: &str = "SETTLED";
pub const FAILED: &str = "FAILED";
pub const STATES: &[&str] = &[PENDING, SETTLED, FAILED];

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
        "settlement_state": s.state,
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
    caller: &Caller,
    r: Report,
    now: DateTime<Utc>,
) -> Result<settlement::Model, ApiError> {
    let merchant = caller.acting.merchant_id;
    super::wallets::require_currency(c, merchant, &r.currency).await?;
    let fresh = settlement::Model {
        id: Uuid::now_v7(),
        merchant_id: merchant,
        integration_id: caller.integration_id,
        reference: r.reference.clone(),
        amount_minor: r.amount_minor,
        currency: r.currency.clone(),
        state: r.state.clone(),
        provider: r.provider.clone(),
        failure_reason: r.failure_reason.clone(),
        is_sandbox: caller.is_sandbox,
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
        return Ok(fresh);
    }
    let mut s =
        store::incentives::lock_settlement(c, caller.integration_id, merchant, &r.reference)
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
    if s.state == r.state {
        return Ok(s);
    }
    if s.state != PENDING {
        return Err(ApiError::field(
            "/state",
            "invalid_transition",
            format!(
                "the reference is {} already and cannot become {}",
                s.state, r.state
            ),
        ));
    }
    s.state = r.state.clone();
    s.provider = r.provider.or(s.provider);
    s.failure_reason = r.failure_reason;
    s.updated_at = now;
    let s = store::incentives::update_settlement(c, s).await?;
    if s.state == FAILED {
        store::outbox::append_all(
            c,
            vec![event(
                "topup.failed",
                &s,
                json!({"failure_reason": s.failure_reason}),
                now,
            )],
        )
        .await?;
    }
    Ok(s)
}

#[derive(Clone, Debug)]
pub struct Confirm {
    pub settlement_reference: String,
    pub customer: IdentityCredential,
    pub wallet_program_id: Option<Uuid>,
}

/// A confirmed top-up as the partner sees it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Confirmed {
    pub topup_id: String,
    pub status: String,
    pub settlement_reference: String,
    pub wallet_id: String,
    pub wallet_user_id: String,
    pub customer_state: String,
    pub credited_actual_minor: i64,
    pub bonus_minor: i64,
    pub bonus_grant_id: Option<String>,
    pub bonus_state: Option<String>,
    pub bonus_expires_at: Option<String>,
    /// The reload-bonus config version the bonus accrued under (none configured: null).
    pub bonus_config_version: Option<i32>,
    pub currency: String,
    pub balance_after: Balance,
    pub created_at: String,
}

fn unusable(issue: &str, message: String) -> ApiError {
    ApiError::field("/settlement_reference", issue, message)
}

/// POST /topup/confirm: credits the settled amount to the customer's actual money once,
/// with the reload bonus of the config in force now (capped by its budget, if it has one).
/// The reference's row lock queues concurrent confirms; the later ones find it used.
pub async fn confirm<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    proof_window: Duration,
    req: Confirm,
    now: DateTime<Utc>,
) -> Result<Confirmed, ApiError> {
    let merchant = caller.acting.merchant_id;
    customers::require_supported(c, caller.integration_id, &req.customer).await?;
    let s = store::incentives::lock_settlement(
        c,
        caller.integration_id,
        merchant,
        &req.settlement_reference,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("Settlement reference"))?;
    match (s.state.as_str(), s.topup_id) {
        (_, Some(t)) => {
            return Err(unusable(
                "settlement_already_used",
                format!("was already confirmed by top-up {t}"),
            )
            .with_details(json!({
                "fields": [{"field": "/settlement_reference", "issue": "settlement_already_used",
                            "message": "was already confirmed"}],
                "topup_id": t.to_string(),
            })));
        }
        (PENDING, None) => {
            return Err(unusable(
                "settlement_pending",
                "has not settled yet; confirm once the provider settles it".into(),
            ));
        }
        (FAILED, None) => {
            return Err(unusable(
                "settlement_failed",
                "did not settle; take the payment again".into(),
            ));
        }
        _ => {}
    }
    let (identity, created) =
        topups::credit_identity(c, sealer, merchant, &req.customer, now).await?;
    let program =
        topups::program_for_credit(c, merchant, req.wallet_program_id, &s.currency).await?;
    let id = Uuid::now_v7();
    let config = store::incentives::current_reload_config(c, program.id).await?;
    let bonus = match &config {
        Some(cfg) => {
            let tiers = reload_bonus::tiers_of(cfg);
            let amount =
                match reload_bonus::tier_for(&tiers, s.amount_minor).and_then(|t| t.bonus()) {
                    Some(b) => b.amount(1, s.amount_minor).ok_or_else(|| {
                        unusable(
                            "too_large",
                            "its reload bonus would exceed the largest amount".into(),
                        )
                    })?,
                    None => 0,
                };
            let days = cfg.expiry_days.unwrap_or(reload_bonus::DEFAULT_EXPIRY_DAYS);
            (amount > 0).then(|| BonusGrant {
                amount,
                source: "RELOAD_BONUS",
                expires_at: now + Duration::days(i64::from(days)),
                budget_id: cfg.budget_id,
            })
        }
        None => None,
    };
    let Credited {
        identity,
        wallet: w,
        grant,
        balance,
        posting_id,
        mut events,
    } = topups::credit_wallet(
        c,
        proof_window,
        Credit {
            topup_id: id,
            identity,
            created,
            program: &program,
            amount: s.amount_minor,
            bonus,
            memo: format!("settlement {}", s.reference),
            field: "/settlement_reference",
        },
        now,
    )
    .await?;
    // The budget may have given less than the tier (or nothing).
    let bonus_minor = grant.as_ref().map_or(0, |g| g.original_minor);
    let outcome = Confirmed {
        topup_id: id.to_string(),
        status: "credited".into(),
        settlement_reference: s.reference.clone(),
        wallet_id: w.id.to_string(),
        wallet_user_id: identity.id.to_string(),
        customer_state: identity.state.clone(),
        credited_actual_minor: s.amount_minor,
        bonus_minor,
        bonus_grant_id: grant.as_ref().map(|g| g.id.to_string()),
        bonus_state: grant.as_ref().map(|g| g.state.clone()),
        bonus_expires_at: grant.as_ref().map(|g| {
            g.expires_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        }),
        bonus_config_version: config.as_ref().map(|c| c.version),
        currency: w.currency.clone(),
        balance_after: balance,
        created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    };
    // The topups row's unique (merchant, kind, reference) is a second guard on "once".
    store::topups::claim(
        c,
        topup::Model {
            id,
            merchant_id: merchant,
            integration_id: caller.integration_id,
            kind: "settlement".into(),
            order_ref: s.reference.clone(),
            sku_id: None,
            sku_version: None,
            quantity: None,
            wallet_id: w.id,
            wallet_user_id: identity.id,
            credited_actual_minor: s.amount_minor,
            bonus_minor,
            bonus_grant_id: grant.as_ref().map(|g| g.id),
            currency: w.currency.clone(),
            fingerprint: crate::crypto::sha256_hex(
                format!("{:?}|{:?}", req.customer, req.wallet_program_id).as_bytes(),
            ),
            result: serde_json::to_value(&outcome).map_err(ApiError::internal)?,
            branch_id: caller.acting.branch_id,
            terminal_id: caller.terminal_id.clone(),
            cashier_id: caller.acting.cashier_id.clone(),
            service_session_id: None,
            posting_id,
            created_at: now,
            bonus_config_version: config.as_ref().map(|c| c.version),
        },
    )
    .await?
    .then_some(())
    .ok_or_else(|| unusable("settlement_already_used", "was already confirmed".into()))?;
    let mut used = s.clone();
    used.topup_id = Some(id);
    used.updated_at = now;
    let used = store::incentives::update_settlement(c, used).await?;
    events.push(event(
        "topup.confirmed",
        &used,
        json!({
            "topup_id": id.to_string(),
            "kind": "settlement",
            "wallet_id": w.id.to_string(),
            "credited_actual_minor": s.amount_minor,
            "bonus_minor": bonus_minor,
            "currency": w.currency,
        }),
        now,
    ));
    store::outbox::append_all(c, events).await?;
    Ok(outcome)
}
