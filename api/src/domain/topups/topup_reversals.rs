//! Taking a top-up's credit back from the wallet it went to: a chargeback (a dispute of the
//! top-up that the customer won: what they paid goes back to them outside the wallet) or the
//! top-up detached from a customer it was wrongly attached to (a cashier keyed the wrong
//! phone number; the till then rings the sale again for the right one).
//!
//! Either way the wallet gives back what it still holds of the credit (its actual money,
//! then what a lapsed enrollment moved into escrow for it) and never goes below zero: what
//! the customer already spent stays spent and is reported as unrecovered. The top-up's
//! bonus grant ends with it (see `grants::take_back_bonus`), and the top-up becomes
//! `reversed`. A top-up is reversed at most once (a unique index holds it under any race).
use chrono::{DateTime, Utc};
use entities::{topup, topup_reversal, wallet};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::topups::{Topup, TopupReversal};
use crate::domain::{
    credentials::Principal,
    customers::wallets::{self, Balance},
    incentives::budgets,
    incentives::grants,
    ledger, operators,
    outbox::events::{NewOutbox, OutboxKind},
    transactions::corrections,
    transactions::{self, Located},
};
use crate::{error::ApiError, store};

pub const CHARGEBACK: &str = "chargeback";
pub const UNATTACH: &str = "unattach";

#[derive(Clone, Debug)]
pub struct TakenBack {
    pub topup: Topup,
    pub reversal: TopupReversal,
    pub balance_after: Balance,
}

/// The top-up of a located transaction, re-read with its wallet locked, so that nothing
/// spends from the wallet or reverses the top-up while the caller decides.
pub(crate) async fn lock_topup<C: ConnectionTrait>(
    c: &C,
    t: &topup::Model,
) -> Result<(topup::Model, wallet::Model), ApiError> {
    let w = store::customers::wallets::lock_wallet(c, t.merchant_id, t.wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let t = store::topups::find(c, t.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Transaction"))?;
    Ok((t, w))
}

/// Takes back up to `amount` of the credit of `t` from `w` (locked by the caller, who has
/// checked the top-up is credited). Returns what it did and its events (the bonus grant's
/// promo_grant.clawed_back and wallet.balance_changed); the caller adds the transaction's.
pub(crate) async fn take_back<C: ConnectionTrait>(
    c: &C,
    t: topup::Model,
    w: &wallet::Model,
    kind: &'static str,
    amount: i64,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<(TakenBack, Vec<NewOutbox>), ApiError> {
    let id = Uuid::now_v7();
    let from_wallet = amount.clamp(0, w.actual_minor.max(0));
    // A lapsed enrollment moved the wallet's money into the merchant's escrow for it, to
    // return on verification: what the wallet lacks is taken from there, so a wrongly
    // attached credit never comes back to that customer later.
    let escrowed = store::ledger::account_balance(c, ledger::Account::MerchantEscrow(w.id)).await?;
    let from_escrow = (amount - from_wallet).clamp(0, escrowed.max(0));
    let taken = from_wallet + from_escrow;
    let posting_id = if taken > 0 {
        Some(
            store::ledger::post(
                c,
                &ledger::posting::topup_reversal(
                    t.merchant_id,
                    w.id,
                    &t.currency,
                    from_wallet,
                    from_escrow,
                ),
                store::ledger::Reference {
                    kind: ledger::PostingKind::TopupReversal.as_str(),
                    id,
                    memo: reason.clone(),
                    at: now,
                },
            )
            .await?,
        )
    } else {
        None
    };
    let mut events = Vec::new();
    let mut bonus_clawed_back_minor = 0;
    if let Some(g) = t.bonus_grant_id {
        let (amount, event) = grants::take_back_bonus(c, g, kind, now).await?;
        bonus_clawed_back_minor = amount;
        events.extend(event);
        give_back_budget(c, &t, w, amount, now).await?;
    }
    let reversal = topup_reversal::Model {
        id,
        topup_id: t.id,
        integration_id: t.integration_id,
        merchant_id: t.merchant_id,
        wallet_id: w.id,
        kind: kind.into(),
        amount_minor: taken,
        unrecovered_minor: amount - taken,
        bonus_clawed_back_minor,
        reason,
        posting_id,
        created_at: now,
    };
    store::disputes::insert_reversal(c, reversal.clone()).await?;
    let topup = topup::Model {
        status: crate::domain::topups::REVERSED,
        ..t
    };
    store::topups::update(c, topup.clone()).await?;
    let w = store::customers::wallets::find_wallet(c, w.merchant_id, w.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let balance_after = wallets::current_balance(c, &w, now).await?;
    if taken > 0 || bonus_clawed_back_minor > 0 {
        events.push(wallets::balance_changed(&w, &balance_after, kind, id, now));
    }
    Ok((
        TakenBack {
            topup: topup.into(),
            reversal: reversal.into(),
            balance_after,
        },
        events,
    ))
}

/// A settlement top-up's bonus drew on the budget of the reload-bonus config it accrued
/// under: what is taken back of it goes back to that budget, as a reversed payment's
/// reward does. (A SKU's bonus has no budget.)
async fn give_back_budget<C: ConnectionTrait>(
    c: &C,
    t: &topup::Model,
    w: &wallet::Model,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let Some(version) = t.bonus_config_version else {
        return Ok(());
    };
    let config = store::incentives::reload_config_version(c, w.wallet_program_id, version).await?;
    if let Some(budget) = config.and_then(|cfg| cfg.budget_id) {
        budgets::give_back(c, t.merchant_id, budget, amount, now).await?;
    }
    Ok(())
}

/// Why a top-up has no credit to take back, or None when it has.
pub(crate) fn nothing_to_take(t: &topup::Model) -> Option<&'static str> {
    match t.status {
        crate::domain::topups::PENDING | crate::domain::topups::FAILED => {
            Some("nothing was credited: its settlement has not settled")
        }
        crate::domain::topups::REVERSED => Some("its credit was already taken back"),
        _ => None,
    }
}

/// Detaches a credited top-up from the customer it was attached to: its credit leaves the
/// wallet (what the wallet still holds of it), its bonus is clawed back, and
/// transaction.unattached fires in the top-up's sequence. A wallet payment cannot be
/// detached (the customer's own wallet paid it: refund or void it instead), nor a top-up
/// with an open dispute. Audited with the key that asked.
pub async fn unattach<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    merchant: Uuid,
    integration_id: Uuid,
    id: Uuid,
    reason: String,
    now: DateTime<Utc>,
) -> Result<TakenBack, ApiError> {
    let located = transactions::locate(c, p, integration_id, id).await?;
    corrections::same_merchant(merchant, &located)?;
    let t = match located {
        Located::Payment(_) => {
            return Err(ApiError::field(
                "path:transactionId",
                "not_detachable",
                "is a wallet payment, paid from the customer's own wallet: refund or void it instead",
            ));
        }
        // The provider reference a settlement top-up was confirmed against credits once:
        // detached, it could not be confirmed for the right customer. A dispute takes it
        // back instead.
        Located::Topup(t) if t.kind != "sku" => {
            return Err(ApiError::field(
                "path:transactionId",
                "not_detachable",
                "is a settlement top-up, confirmed against its provider reference: dispute it instead",
            ));
        }
        Located::Topup(t) => t,
    };
    let (t, w) = lock_topup(c, &t).await?;
    if let Some(why) = nothing_to_take(&t) {
        return Err(ApiError::field(
            "path:transactionId",
            "nothing_to_detach",
            why,
        ));
    }
    corrections::none_open(c, t.id).await?;
    let amount = t.credited_actual_minor;
    let (done, mut events) =
        take_back(c, t, &w, UNATTACH, amount, Some(reason.clone()), now).await?;
    let r = &done.reversal;
    let t = &done.topup;
    events.push(NewOutbox {
        kind: OutboxKind::Event,
        topic: "transaction.unattached".into(),
        merchant_id: Some(t.merchant_id),
        resource_type: "topup".into(),
        resource_id: t.id.to_string(),
        payload: json!({
            "transaction_id": t.id.to_string(),
            "type": "topup",
            "reversal_id": r.id.to_string(),
            "wallet_id": t.wallet_id.to_string(),
            "wallet_user_id": t.wallet_user_id.to_string(),
            "order_ref": t.order_ref,
            "credited_actual_minor": t.credited_actual_minor,
            "taken_back_minor": r.taken_back_minor,
            "unrecovered_minor": r.unrecovered_minor,
            "bonus_clawed_back_minor": r.bonus_clawed_back_minor,
            "currency": t.currency,
            "reason": reason,
        }),
        occurred_at: now,
    });
    store::outbox::append_all(c, events).await?;
    operators::audit(
        c,
        &p.actor(),
        "transaction.unattach",
        "topup",
        Some(t.id.to_string()),
        Some(reason),
        json!({
            "merchant_id": t.merchant_id.to_string(),
            "wallet_id": t.wallet_id.to_string(),
            "reversal_id": r.id.to_string(),
            "taken_back_minor": r.taken_back_minor,
            "unrecovered_minor": r.unrecovered_minor,
            "bonus_clawed_back_minor": r.bonus_clawed_back_minor,
            "currency": t.currency,
        }),
    )
    .await?;
    Ok(done)
}
