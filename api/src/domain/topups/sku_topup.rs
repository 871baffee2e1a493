//! A SKU top-up rung at the till (`POST /topup/sku/{sku_id}`): one order credits once,
//! with the SKU's bonus.
use chrono::{DateTime, Duration, Utc};
use entities::topup;
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::topups::{
    BonusGrant, CREDITED, Credit, Credited, DEFAULT_BONUS_DAYS, bonus_of, credit_identity,
    credit_wallet, order_reused, program_for_credit, ts,
};

use crate::{
    domain::{
        credentials::scope::Acting,
        customers::wallets::Balance,
        customers::{self, IdentityCredential},
        ledger::money,
        outbox::events::{NewOutbox, OutboxKind},
        payments::checkout,
    },
    error::ApiError,
    infra::crypto::Sealer,
    store,
};

#[derive(Clone, Debug)]
pub struct SkuTopup {
    pub sku_id: String,
    pub pos_order_ref: String,
    pub customer: IdentityCredential,
    pub quantity: i64,
    pub wallet_program_id: Option<Uuid>,
    pub service_session_id: Option<Uuid>,
}

pub(super) fn fingerprint(req: &SkuTopup) -> String {
    crate::infra::crypto::sha256_hex(
        format!(
            "{}|{}|{:?}|{:?}",
            req.sku_id, req.quantity, req.customer, req.wallet_program_id
        )
        .as_bytes(),
    )
}

/// A top-up's result as the partner sees it (stored with the top-up, so every report of
/// the order gets the same answer).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TopupOutcome {
    pub topup_id: String,
    pub status: String,
    pub sku_id: String,
    pub sku_version: i32,
    pub quantity: i64,
    pub pos_order_ref: String,
    pub wallet_id: String,
    pub wallet_user_id: String,
    /// VERIFIED, or PENDING_PROOF when the credit is held for a customer still to enroll.
    pub customer_state: String,
    pub credited_actual_minor: i64,
    pub bonus_minor: i64,
    pub bonus_grant_id: Option<String>,
    /// RELEASED, or LOCKED while the customer has not proven the phone.
    pub bonus_state: Option<String>,
    pub bonus_expires_at: Option<String>,
    pub currency: String,
    pub balance_after: Balance,
    pub created_at: String,
}

/// POST /topup/sku/{skuId}: credits quantity × the SKU's credit as actual money and accrues
/// its bonus as a SKU_TOPUP_BONUS grant in the same transaction: RELEASED for a VERIFIED
/// customer; LOCKED, with the credit held in a PENDING_PROOF proto-wallet (created if
/// absent), for anyone else. A repeated report of the order returns the first result.
pub async fn topup_sku<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    proof_window: Duration,
    req: SkuTopup,
    now: DateTime<Utc>,
) -> Result<TopupOutcome, ApiError> {
    let merchant = acting.merchant_id;
    let sku = store::topups::find_sku(c, merchant, &req.sku_id)
        .await?
        .filter(|s| s.active)
        .ok_or_else(|| ApiError::not_found("SKU"))?;
    customers::require_supported(c, acting.integration_id, &req.customer).await?;
    let fp = fingerprint(&req);
    let id = Uuid::now_v7();
    let placeholder = topup::Model {
        id,
        merchant_id: merchant,
        integration_id: acting.integration_id,
        kind: "sku".into(),
        order_ref: req.pos_order_ref.clone(),
        sku_id: Some(sku.sku_id.clone()),
        sku_version: Some(sku.version),
        quantity: Some(req.quantity),
        wallet_id: Uuid::nil(),
        wallet_user_id: Uuid::nil(),
        credited_actual_minor: 0,
        bonus_minor: 0,
        bonus_grant_id: None,
        currency: sku.currency.clone(),
        fingerprint: fp.clone(),
        result: json!({}),
        branch_id: acting.branch_id,
        terminal_id: acting.terminal_id.clone(),
        cashier_id: acting.cashier_id.clone(),
        service_session_id: req.service_session_id,
        posting_id: Uuid::nil(),
        created_at: now,
        bonus_config_version: None,
        status: CREDITED,
    };
    if !store::topups::claim(c, placeholder.clone()).await? {
        let first = store::topups::find_by_order(c, merchant, "sku", &req.pos_order_ref)
            .await?
            .ok_or_else(|| ApiError::conflict("The order is being credited; retry."))?;
        if first.fingerprint != fp {
            return Err(order_reused());
        }
        return serde_json::from_value(first.result).map_err(ApiError::internal);
    }
    let session = match req.service_session_id {
        Some(s) => Some(checkout::hold(c, acting, s, now).await?),
        None => None,
    };
    let (identity, created) = credit_identity(c, sealer, merchant, &req.customer, now).await?;
    if let Some(s) = &session {
        checkout::check_customer(s, identity.id, "/customer")?;
    }
    let program = program_for_credit(c, merchant, req.wallet_program_id, &sku.currency).await?;
    let too_large = |what: &str| {
        ApiError::field(
            "/quantity",
            "too_large",
            format!(
                "the {what} would exceed the largest amount ({})",
                money::MAX_AMOUNT_MINOR
            ),
        )
    };
    let credit =
        money::times(sku.wallet_credits_minor, req.quantity).ok_or_else(|| too_large("credit"))?;
    let bonus = match bonus_of(&sku) {
        Some(b) => b
            .amount(req.quantity, credit)
            .ok_or_else(|| too_large("bonus"))?,
        None => 0,
    };
    let days = sku.bonus_expiry_days.unwrap_or(DEFAULT_BONUS_DAYS);
    let Credited {
        identity,
        wallet: w,
        grant,
        balance,
        posting_id,
        mut events,
    } = credit_wallet(
        c,
        proof_window,
        Credit {
            topup_id: id,
            identity,
            created,
            program: &program,
            amount: credit,
            load: crate::domain::ledger::posting::Load::Sku,
            bonus: (bonus > 0).then(|| BonusGrant {
                amount: bonus,
                source: "SKU_TOPUP_BONUS",
                expires_at: now + Duration::days(i64::from(days)),
                budget_id: None,
            }),
            memo: format!(
                "sku {} x{} order {}",
                sku.sku_id, req.quantity, req.pos_order_ref
            ),
            field: "/quantity",
            limit_mode: Some(acting.is_sandbox),
        },
        now,
    )
    .await?;
    events.push(NewOutbox {
        kind: OutboxKind::Event,
        topic: "topup.confirmed".into(),
        merchant_id: Some(merchant),
        resource_type: "topup".into(),
        resource_id: id.to_string(),
        payload: json!({
            "topup_id": id.to_string(),
            "kind": "sku",
            "wallet_id": w.id.to_string(),
            "credited_actual_minor": credit,
            "bonus_minor": bonus,
            "currency": w.currency,
            "sku_id": sku.sku_id,
            "quantity": req.quantity,
            "pos_order_ref": req.pos_order_ref,
        }),
        occurred_at: now,
    });
    store::outbox::append_all(c, events).await?;
    let outcome = TopupOutcome {
        topup_id: id.to_string(),
        status: "credited".into(),
        sku_id: sku.sku_id.clone(),
        sku_version: sku.version,
        quantity: req.quantity,
        pos_order_ref: req.pos_order_ref.clone(),
        wallet_id: w.id.to_string(),
        wallet_user_id: identity.id.to_string(),
        customer_state: identity.state.as_str().to_string(),
        credited_actual_minor: credit,
        bonus_minor: bonus,
        bonus_grant_id: grant.as_ref().map(|g| g.id.to_string()),
        bonus_state: grant.as_ref().map(|g| g.state.as_str().to_string()),
        bonus_expires_at: grant.as_ref().map(|g| ts(g.expires_at)),
        currency: w.currency.clone(),
        balance_after: balance,
        created_at: ts(now),
    };
    store::topups::update(
        c,
        topup::Model {
            wallet_id: w.id,
            wallet_user_id: identity.id,
            credited_actual_minor: credit,
            bonus_minor: bonus,
            bonus_grant_id: grant.as_ref().map(|g| g.id),
            posting_id,
            result: serde_json::to_value(&outcome).map_err(ApiError::internal)?,
            ..placeholder
        },
    )
    .await?;
    Ok(outcome)
}
