//! Confirming a settlement reference at the till: a settled reference credits once, with
//! the reload bonus in force; a pending one holds the request until it settles or fails.
use chrono::{DateTime, Duration, Utc};
use entities::{settlement, topup};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::topups::settlements::{
    FAILED, PENDING, confirmed_event, reload_bonus_for, settled_event,
};

use crate::{
    domain::{
        credentials::scope::Acting,
        customers::wallets::Balance,
        customers::{self, IdentityCredential},
        outbox::events::NewOutbox,
        topups::{self, Credit, Credited},
    },
    error::ApiError,
    infra::crypto::Sealer,
    store,
};

/// Posts a requested top-up to the wallet's pending top-ups (`amount` > 0), or takes it off
/// once its settlement is known (`amount` < 0).
async fn post_request<C: ConnectionTrait>(
    c: &C,
    w: &entities::wallet::Model,
    topup_id: Uuid,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let posting =
        crate::domain::ledger::posting::topup_request(w.merchant_id, w.id, &w.currency, amount);
    let reference = store::ledger::Reference {
        kind: "topup",
        id: topup_id,
        memo: None,
        at: now,
    };
    store::ledger::post(c, &posting, reference).await?;
    Ok(())
}

/// The reference settled: the requested top-up leaves `pending_topups_minor` and is
/// credited, with the reload bonus in force now. Returns its events.
pub(super) async fn credit_requested<C: ConnectionTrait>(
    c: &C,
    proof_window: Duration,
    s: &settlement::Model,
    t: topup::Model,
    now: DateTime<Utc>,
) -> Result<Vec<NewOutbox>, ApiError> {
    let merchant = s.merchant_id;
    let missing = || ApiError::internal("a requested top-up's wallet is gone");
    // The lock order of every credit: the identity, then the wallet.
    let identity = store::customers::wallets::lock_identity(c, merchant, t.wallet_user_id)
        .await?
        .ok_or_else(missing)?;
    let w = store::customers::wallets::lock_wallet(c, merchant, t.wallet_id)
        .await?
        .ok_or_else(missing)?;
    post_request(c, &w, t.id, -s.amount_minor, now).await?;
    let program =
        crate::domain::customers::wallets::program_for(c, merchant, Some(w.wallet_program_id))
            .await?;
    let (bonus, config) = reload_bonus_for(c, &program, s.amount_minor, "/state", now).await?;
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
            topup_id: t.id,
            identity,
            created: false,
            program: &program,
            amount: s.amount_minor,
            load: crate::domain::ledger::posting::Load::Settlement,
            bonus,
            memo: format!("settlement {}", s.reference),
            field: "/state",
            limit_mode: None,
        },
        now,
    )
    .await?;
    let bonus_minor = grant.as_ref().map_or(0, |g| g.original_minor);
    let t_id = t.id;
    let outcome = confirmed(Answer {
        id: t.id,
        status: topups::CREDITED,
        settlement: s,
        wallet: &w,
        identity: &identity,
        grant: grant.as_ref(),
        bonus_config_version: config.as_ref().map(|c| c.version),
        balance,
        at: t.created_at,
    });
    store::topups::update(
        c,
        topup::Model {
            status: topups::CREDITED,
            credited_actual_minor: s.amount_minor,
            bonus_minor,
            bonus_grant_id: grant.as_ref().map(|g| g.id),
            posting_id,
            bonus_config_version: config.as_ref().map(|c| c.version),
            result: serde_json::to_value(&outcome).map_err(ApiError::internal)?,
            ..t
        },
    )
    .await?;
    events.push(confirmed_event(s, t_id, &w, bonus_minor, now));
    events.push(settled_event(s, t_id, &w, now));
    Ok(events)
}

/// The reference failed: the requested top-up leaves `pending_topups_minor`, credited
/// nothing. Returns its events.
pub(super) async fn drop_requested<C: ConnectionTrait>(
    c: &C,
    s: &settlement::Model,
    t: topup::Model,
    now: DateTime<Utc>,
) -> Result<Vec<NewOutbox>, ApiError> {
    let merchant = t.merchant_id;
    let w = store::customers::wallets::lock_wallet(c, merchant, t.wallet_id)
        .await?
        .ok_or_else(|| ApiError::internal("a requested top-up's wallet is gone"))?;
    post_request(c, &w, t.id, -s.amount_minor, now).await?;
    let id = t.id;
    store::topups::update(
        c,
        topup::Model {
            status: topups::FAILED,
            ..t
        },
    )
    .await?;
    let w = store::customers::wallets::find_wallet(c, merchant, w.id)
        .await?
        .ok_or_else(|| ApiError::internal("a requested top-up's wallet is gone"))?;
    let balance = crate::domain::customers::wallets::current_balance(c, &w, now).await?;
    Ok(vec![crate::domain::customers::wallets::balance_changed(
        &w, &balance, "topup", id, now,
    )])
}

/// A confirm's answer.
/// What a confirm's answer is made of.
pub(super) struct Answer<'a> {
    pub id: Uuid,
    pub status: topups::TopupStatus,
    pub settlement: &'a settlement::Model,
    pub wallet: &'a entities::wallet::Model,
    pub identity: &'a entities::wallet_user::Model,
    pub grant: Option<&'a entities::promo_grant::Model>,
    pub bonus_config_version: Option<i32>,
    pub balance: Balance,
    pub at: DateTime<Utc>,
}

pub(super) fn confirmed(a: Answer<'_>) -> Confirmed {
    let Answer {
        id,
        status,
        settlement: s,
        wallet: w,
        identity,
        grant,
        bonus_config_version,
        balance,
        at,
    } = a;
    let credited = status == topups::CREDITED;
    Confirmed {
        topup_id: id.to_string(),
        status: status.as_str().into(),
        settlement_reference: s.reference.clone(),
        wallet_id: w.id.to_string(),
        wallet_user_id: identity.id.to_string(),
        customer_state: identity.state.as_str().to_string(),
        credited_actual_minor: if credited { s.amount_minor } else { 0 },
        bonus_minor: grant.map_or(0, |g| g.original_minor),
        bonus_grant_id: grant.map(|g| g.id.to_string()),
        bonus_state: grant.map(|g| g.state.as_str().to_string()),
        bonus_expires_at: grant.map(|g| {
            g.expires_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        }),
        bonus_config_version,
        currency: w.currency.clone(),
        balance_after: balance,
        created_at: at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    }
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

pub(super) fn unusable(issue: &str, message: String) -> ApiError {
    ApiError::field("/settlement_reference", issue, message)
}

/// POST /topup/confirm: credits the settled amount to the customer's actual money once,
/// with the reload bonus of the config in force now (capped by its budget, if it has one).
/// Against a reference still PENDING the top-up is requested instead: shown in the
/// wallet's `pending_topups_minor` until the reference settles (credited then) or fails.
/// The reference's row lock queues concurrent confirms; the later ones find it used.
pub async fn confirm<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    proof_window: Duration,
    req: Confirm,
    now: DateTime<Utc>,
) -> Result<Confirmed, ApiError> {
    let merchant = acting.merchant_id;
    customers::require_supported(c, acting.integration_id, &req.customer).await?;
    let s = store::incentives::lock_settlement(
        c,
        acting.integration_id,
        merchant,
        &req.settlement_reference,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("Settlement reference"))?;
    match (s.state, s.topup_id) {
        (FAILED, _) => {
            return Err(unusable(
                "settlement_failed",
                "did not settle; take the payment again".into(),
            ));
        }
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
        _ => {}
    }
    let (identity, created) =
        topups::credit_identity(c, sealer, merchant, &req.customer, now).await?;
    let program =
        topups::program_for_credit(c, merchant, req.wallet_program_id, &s.currency).await?;
    let id = Uuid::now_v7();
    let fingerprint = crate::infra::crypto::sha256_hex(
        format!("{:?}|{:?}", req.customer, req.wallet_program_id).as_bytes(),
    );
    let row = |status: topups::TopupStatus,
               w: &entities::wallet::Model,
               identity: &entities::wallet_user::Model,
               outcome: &Confirmed|
     -> Result<topup::Model, ApiError> {
        Ok(topup::Model {
            id,
            merchant_id: merchant,
            integration_id: acting.integration_id,
            kind: "settlement".into(),
            order_ref: s.reference.clone(),
            sku_id: None,
            sku_version: None,
            quantity: None,
            wallet_id: w.id,
            wallet_user_id: identity.id,
            credited_actual_minor: outcome.credited_actual_minor,
            bonus_minor: outcome.bonus_minor,
            bonus_grant_id: outcome
                .bonus_grant_id
                .as_deref()
                .and_then(|g| Uuid::parse_str(g).ok()),
            currency: w.currency.clone(),
            fingerprint: fingerprint.clone(),
            result: serde_json::to_value(outcome).map_err(ApiError::internal)?,
            branch_id: acting.branch_id,
            terminal_id: acting.terminal_id.clone(),
            cashier_id: acting.cashier_id.clone(),
            service_session_id: None,
            posting_id: Uuid::nil(),
            created_at: now,
            bonus_config_version: outcome.bonus_config_version,
            status,
        })
    };
    let mut events = Vec::new();
    let (outcome, model) = if s.state == PENDING {
        let found =
            crate::domain::customers::wallets::wallet_in_program(c, &identity, &program, now)
                .await?;
        if created {
            events.push(crate::domain::customers::enrollment::enrolled_event(
                &identity, &found, None, now,
            ));
        }
        let w = store::customers::wallets::lock_wallet(c, merchant, found.id)
            .await?
            .ok_or_else(|| ApiError::not_found("Wallet"))?;
        // A request is checked against the top-up limit now, as a credit would be.
        crate::domain::risk::limits::check_topup(
            c,
            (merchant, acting.is_sandbox),
            w.id,
            s.amount_minor,
            now,
        )
        .await?;
        // It must fit once it settles.
        crate::domain::customers::wallets::ensure_room(
            c,
            &w,
            s.amount_minor,
            "/settlement_reference",
        )
        .await?;
        post_request(c, &w, id, s.amount_minor, now).await?;
        let w = store::customers::wallets::find_wallet(c, merchant, w.id)
            .await?
            .ok_or_else(|| ApiError::not_found("Wallet"))?;
        let balance = crate::domain::customers::wallets::current_balance(c, &w, now).await?;
        events.push(crate::domain::customers::wallets::balance_changed(
            &w, &balance, "topup", id, now,
        ));
        let outcome = confirmed(Answer {
            id,
            status: topups::PENDING,
            settlement: &s,
            wallet: &w,
            identity: &identity,
            grant: None,
            bonus_config_version: None,
            balance,
            at: now,
        });
        let model = row(topups::PENDING, &w, &identity, &outcome)?;
        (outcome, model)
    } else {
        let (bonus, config) =
            reload_bonus_for(c, &program, s.amount_minor, "/settlement_reference", now).await?;
        let credited = topups::credit_wallet(
            c,
            proof_window,
            Credit {
                topup_id: id,
                identity,
                created,
                program: &program,
                amount: s.amount_minor,
                load: crate::domain::ledger::posting::Load::Settlement,
                bonus,
                memo: format!("settlement {}", s.reference),
                field: "/settlement_reference",
                limit_mode: Some(acting.is_sandbox),
            },
            now,
        )
        .await?;
        events.extend(credited.events);
        let outcome = confirmed(Answer {
            id,
            status: topups::CREDITED,
            settlement: &s,
            wallet: &credited.wallet,
            identity: &credited.identity,
            grant: credited.grant.as_ref(),
            bonus_config_version: config.as_ref().map(|c| c.version),
            balance: credited.balance,
            at: now,
        });
        let mut model = row(
            topups::CREDITED,
            &credited.wallet,
            &credited.identity,
            &outcome,
        )?;
        model.posting_id = credited.posting_id;
        events.push(confirmed_event(
            &s,
            id,
            &credited.wallet,
            outcome.bonus_minor,
            now,
        ));
        events.push(settled_event(&s, id, &credited.wallet, now));
        (outcome, model)
    };
    // The topups row's unique (merchant, kind, reference) is a second guard on "once".
    store::topups::claim(c, model)
        .await?
        .then_some(())
        .ok_or_else(|| unusable("settlement_already_used", "was already confirmed".into()))?;
    let mut used = s.clone();
    used.topup_id = Some(id);
    used.updated_at = now;
    store::incentives::update_settlement(c, used).await?;
    store::outbox::append_all(c, events).await?;
    Ok(outcome)
}
