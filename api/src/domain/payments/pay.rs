//! The debit: the credential is taken (spent once), the wallet is locked, the plan is
//! posted through the ledger, and the payment, its events and its rewards are written in
//! the caller's transaction.
use chrono::{DateTime, Utc};
use entities::{otp_session::OtpSessionStatus, payment, payment::PaymentStatus, wallet};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::payments::{
    BasketLine, Payment, WRONG_OTP, check_basket, check_session,
    otp::{CheckedOtp, code_is},
    otp_invalid, pending_proof, replayed,
};

use crate::{
    domain::{
        credentials::credential_codes::{nonce_hash, short_code_hash},
        credentials::scope::Acting,
        customers::enrollment,
        customers::wallets::{self, Balance},
        incentives::cashback,
        ledger::{self, DebitPlan},
        outbox::events::{NewOutbox, OutboxKind},
        payments::checkout,
    },
    error::ApiError,
    infra::crypto::Sealer,
    store::{self, WriteTxn, db::writes::Writes},
};

// ---------------------------------------------------------------------------------------
// Payment

#[derive(Clone, Debug)]
pub enum Credential {
    Otp {
        phone: String,
        otp_code: String,
        otp_session_id: Uuid,
    },
    Qr {
        qr_payload: String,
    },
    ShortCode {
        short_code: String,
    },
}

impl Credential {
    pub fn type_name(&self) -> &'static str {
        match self {
            Credential::Otp { .. } => "otp",
            Credential::Qr { .. } => "qr",
            Credential::ShortCode { .. } => "short_code",
        }
    }

    /// What risk controls count this credential's failures as.
    pub fn entry(&self) -> crate::domain::risk::failures::Entry {
        use crate::domain::risk::failures::Entry;
        match self {
            Credential::Otp { .. } => Entry::Otp,
            Credential::Qr { .. } => Entry::Qr,
            Credential::ShortCode { .. } => Entry::ShortCode,
        }
    }
}

/// The payment credential types this version accepts: all dynamic. `pass_tap` is part of
/// the contract's union but no pass is issued yet, so it answers
/// CREDENTIAL_TYPE_UNSUPPORTED and is not advertised.
pub const ENABLED_CREDENTIALS: &[&str] = &["otp", "qr", "short_code"];

/// Identity credential types that name a customer without proving presence: a payment
/// presented with one is REQUIRES_DYNAMIC_CREDENTIAL (the spec's "path needs a dynamic
/// credential (QR or OTP)"), never a debit.
pub const STATIC_IDENTIFIERS: &[&str] = &[
    "phone",
    "card_fingerprint",
    "provider_customer_id",
    "wallet_user_id",
];

#[derive(Clone, Debug)]
pub struct Pay {
    pub credential: Credential,
    pub amount_minor: i64,
    pub currency: String,
    /// Effective: the request's `order_ref`, else `context.partner_session_id`.
    pub order_ref: Option<String>,
    pub wallet_program_id: Option<Uuid>,
    pub basket: Option<Vec<BasketLine>>,
    pub received_at: DateTime<Utc>,
    /// `context.service_session_id`: the checkout session the payment completes.
    pub service_session_id: Option<Uuid>,
}

/// What admission (`domain::payments::admission`) lets through to the payment, for an OTP
/// payment: the wallet's turn, held until the wallet is locked, and the code as checked.
pub struct Admitted<Turn> {
    pub turn: Option<Turn>,
    pub otp: Option<CheckedOtp>,
}

impl<Turn> Default for Admitted<Turn> {
    fn default() -> Self {
        Admitted {
            turn: None,
            otp: None,
        }
    }
}

/// Checks the credential and consumes it, in the payment's transaction (a later failure
/// rolls the consumption back with the rest), in the statement that locks its wallet:
/// payments of one wallet queue on its lock for as few round trips as possible. Returns the
/// wallet, locked, with what the payment reads of it.
pub(super) async fn take_credential<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    (merchant, sandbox): (Uuid, bool),
    (pay, checked): (&Pay, Option<&CheckedOtp>),
    payment_id: Uuid,
    now: DateTime<Utc>,
) -> Result<store::customers::for_payment::ForPayment, ApiError> {
    let nonce_use = store::payments::NonceUse {
        payment_id,
        sandbox,
        session: pay.service_session_id,
        received_at: pay.received_at,
        now,
    };
    match &pay.credential {
        Credential::Otp {
            phone: _,
            otp_code,
            otp_session_id,
        } => {
            // `verify_otp` already checked (and counted) the code in its own transaction.
            // One statement consumes the session if it is still active and locks its
            // wallet. The checks below see the session as it was; a mismatch rolls the
            // consumption back with the payment (and frees the wallet). The phone is
            // compared with the wallet's owner once `pay` has read it.
            let Some((found, mut s)) = store::payments::take_otp_and_lock_wallet(
                c,
                merchant,
                sandbox,
                *otp_session_id,
                payment_id,
                now,
            )
            .await?
            else {
                // Unknown or no longer active: read it to say which.
                let s = store::payments::lock_otp(c, merchant, *otp_session_id)
                    .await?
                    .ok_or_else(|| otp_invalid("unknown_session", "Unknown OTP session."))?;
                check_session(&s, pay, now)?;
                return Err(replayed("The credential was used by another payment."));
            };
            s.status = OtpSessionStatus::Active;
            check_session(&s, pay, now)?;
            if !checked.is_some_and(|c| c.vouches_for(&s)) && !code_is(sealer, &s, otp_code) {
                return Err(otp_invalid(WRONG_OTP, "Wrong OTP."));
            }
            Ok(found)
        }
        Credential::Qr { qr_payload } => {
            // One statement checks and consumes it (the rules of `usable_nonce`) and locks
            // its wallet.
            store::payments::take_qr_and_lock_wallet(
                c,
                merchant,
                &nonce_hash(qr_payload),
                nonce_use,
            )
            .await?
            .ok_or_else(|| replayed("Unknown, expired or already used QR code; mint a new one."))
        }
        Credential::ShortCode { short_code } => {
            // Likewise, for the newest live nonce carrying the code.
            store::payments::take_short_code_and_lock_wallet(
                c,
                merchant,
                &short_code_hash(sealer, merchant, short_code),
                nonce_use,
            )
            .await?
            .ok_or_else(|| replayed("Unknown, expired or already used short code; mint a new one."))
        }
    }
}

/// A completed (or later voided) payment with the balance right after it.
pub struct Paid {
    pub payment: Payment,
    pub balance_after: Balance,
    /// The CASHBACK grant the payment earned under its program's rule, if any.
    pub cashback: Option<crate::domain::incentives::grants::Grant>,
}

pub(super) fn split_json(grants: &[(Uuid, i64)]) -> serde_json::Value {
    json!(
        grants
            .iter()
            .map(|(g, a)| json!([g.to_string(), a]))
            .collect::<Vec<_>>()
    )
}

pub(super) fn split_from_json(v: &serde_json::Value) -> Vec<(Uuid, i64)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| {
            let id = Uuid::parse_str(x.get(0)?.as_str()?).ok()?;
            Some((id, x.get(1)?.as_i64()?))
        })
        .collect()
}

/// The balance after `plan` was debited from a wallet read before it (no second read).
pub(super) fn balance_after_debit(
    w: &wallet::Model,
    grants: &[entities::promo_grant::Model],
    plan: &DebitPlan,
    now: DateTime<Utc>,
) -> Balance {
    let mut w = w.clone();
    w.actual_minor -= plan.from_actual;
    let grants: Vec<_> = grants
        .iter()
        .cloned()
        .map(|mut g| {
            for (id, a) in &plan.from_grants {
                if *id == g.id {
                    g.remaining_minor -= a;
                }
            }
            g
        })
        .collect();
    wallets::balance(&w, &grants, now)
}

/// POST /payments: checks the credential, debits exactly `amount_minor` (released promo
/// first, then actual money), consumes the credential, and writes the payment, its
/// posting and its events, all in the caller's transaction. What admission let through:
/// its turn, the caller's place in the wallet's line, is given up as soon as the wallet is
/// locked (the next payment of the wallet can then do everything up to the lock while this
/// one finishes); its OTP check spares the payment computing the code's digest again.
pub async fn pay<Turn: Send>(
    c: &WriteTxn,
    sealer: &Sealer,
    acting: &Acting,
    pay: Pay,
    admitted: Admitted<Turn>,
) -> Result<Paid, ApiError> {
    let now = acting.now();
    let merchant = acting.merchant_id;
    let payment_id = Uuid::now_v7();
    // The session first (it is first in the lock order): two payments in one session
    // queue here, and the second finds it closed. Its state is checked after the
    // credential, whose error tells the cashier what to do (a used QR nonce of a completed
    // session: mint a new one); what the credential took is rolled back with the error.
    let session = match pay.service_session_id {
        Some(id) => Some(checkout::hold_any_state(c, acting, id).await?),
        None => None,
    };
    let store::customers::for_payment::ForPayment {
        wallet: w,
        owner: who,
        rule,
        grants,
        has_limits,
    } = take_credential(
        c,
        sealer,
        (merchant, acting.is_sandbox),
        (&pay, admitted.otp.as_ref()),
        payment_id,
        now,
    )
    .await?;
    drop(admitted.turn);
    if let Some(s) = &session {
        checkout::ensure_open(s, now)?;
    }
    credential_wallet_fits(c, &w, pay.wallet_program_id, &pay.currency).await?;
    if let Credential::Otp { phone, .. } = &pay.credential
        && &who.phone != phone
    {
        return Err(otp_invalid(WRONG_OTP, "Wrong OTP."));
    }
    if !enrollment::may_pay(&who) {
        return Err(pending_proof());
    }
    if let Some(s) = &session {
        checkout::check_customer(s, who.id, "/credential")?;
    }
    let views: Vec<_> = grants.iter().map(wallets::grant_view).collect();
    let plan = ledger::plan_debit(&views, w.actual_minor, pay.amount_minor, now).map_err(|s| {
        ApiError::insufficient_funds(
            s.shortfall_minor,
            s.available_actual_minor,
            s.available_promo_minor,
            &w.currency,
        )
    })?;
    // Under the wallet's lock, so concurrent payments of the wallet are counted in turn.
    if has_limits {
        // Boxed, as `accrue` below: a path only some merchants take, whose kilobytes every
        // payment's future (and each copy of it) would otherwise carry.
        Box::pin(crate::domain::risk::limits::check_payment(
            c,
            acting,
            w.id,
            pay.amount_minor,
            now,
        ))
        .await?;
    }
    // The payment's own writes need nothing back: they are held and go to the database
    // in one batch with the idempotency record (see `store::db::writes`). Nothing below reads
    // a row they touch; cashback's writes are its own rows.
    let mut writes = Writes::default();
    let posting = ledger::posting::payment(merchant, w.id, &w.currency, &plan);
    let posting_id = store::ledger::defer_post(
        &mut writes,
        &posting,
        store::ledger::Reference {
            kind: "payment",
            id: payment_id,
            memo: pay.order_ref.clone(),
            at: now,
        },
    )?;
    let basket = check_basket(&pay, acting);
    let p = payment::Model {
        id: payment_id,
        merchant_id: merchant,
        integration_id: acting.integration_id,
        branch_id: acting.branch_id,
        terminal_id: acting.terminal_id.clone(),
        cashier_id: acting.cashier_id.clone(),
        wallet_id: w.id,
        status: PaymentStatus::Completed,
        credential_type: pay.credential.type_name().into(),
        amount_minor: pay.amount_minor,
        currency: w.currency.clone(),
        debited_promo_minor: plan.promo_minor(),
        debited_actual_minor: plan.from_actual,
        promo_split: split_json(&plan.from_grants),
        refunded_minor: 0,
        order_ref: pay.order_ref.clone(),
        basket: pay.basket.as_ref().map(|b| json!(b)),
        basket_total_minor: basket.total_minor,
        needs_reconciliation: basket.diverges,
        data_completeness_score: basket.completeness,
        posting_id,
        created_at: pay.received_at,
        completed_at: now,
        voided_at: None,
        updated_at: now,
        service_session_id: pay.service_session_id,
    };
    store::payments::defer_insert(&mut writes, p.clone());
    if let Some(s) = session {
        checkout::complete(c, s, p.id, now).await?;
    }
    let cashback = Box::pin(cashback::accrue(c, rule, &p, &w, now)).await?;
    let after = match &cashback {
        // The new grant is part of the balance, in its place in the spend order.
        Some(a) => {
            let mut grants = grants.clone();
            grants.push(a.grant.clone());
            grants.sort_by_key(|g| (g.expires_at, g.created_at));
            balance_after_debit(&w, &grants, &plan, now)
        }
        None => balance_after_debit(&w, &grants, &plan, now),
    };
    let mut events = vec![payment_event(
        "payment.completed",
        &p,
        json!({"cashback_minor": cashback.as_ref().map_or(0, |a| a.grant.original_minor),
               "decision_trace_id": acting.decision_trace_id}),
        now,
    )];
    if let Some(a) = &cashback {
        events.extend(a.events.iter().cloned());
    }
    events.push(wallets::balance_changed(&w, &after, "payment", p.id, now));
    store::outbox::defer_all(&mut writes, events);
    c.defer(writes);
    Ok(Paid {
        payment: p.into(),
        balance_after: after,
        cashback: cashback.map(|a| a.grant.into()),
    })
}

/// The wallet a credential named must be in the program the request names (if any) and in
/// its currency.
pub(crate) async fn credential_wallet_fits<C: ConnectionTrait>(
    c: &C,
    w: &wallet::Model,
    wallet_program_id: Option<Uuid>,
    currency: &str,
) -> Result<(), ApiError> {
    if wallet_program_id.is_some_and(|p| p != w.wallet_program_id) {
        return Err(ApiError::field(
            "/wallet_program_id",
            "credential_mismatch",
            "is not the program of the wallet the credential was issued for",
        ));
    }
    if w.currency != currency {
        // Only now is the merchant's list needed: a currency none of its programs runs in
        // is CURRENCY_NOT_SUPPORTED with that list; one only this wallet is not in, with
        // the wallet's own currency.
        crate::domain::platform::currencies::require_currency(c, w.merchant_id, currency).await?;
        return Err(ApiError::currency_not_supported(std::slice::from_ref(
            &w.currency,
        )));
    }
    Ok(())
}

pub(super) fn payment_event(
    topic: &str,
    p: &payment::Model,
    extra: serde_json::Value,
    now: DateTime<Utc>,
) -> NewOutbox {
    let mut data = json!({
        "payment_id": p.id.to_string(),
        "wallet_id": p.wallet_id.to_string(),
        "status": p.status.as_str(),
        "amount_minor": p.amount_minor,
        "debited_promo_minor": p.debited_promo_minor,
        "debited_actual_minor": p.debited_actual_minor,
        "refunded_minor": p.refunded_minor,
        "currency": p.currency,
        "order_ref": p.order_ref,
        "branch_id": p.branch_id.map(|b| b.to_string()),
    });
    if let (Some(d), Some(x)) = (data.as_object_mut(), extra.as_object()) {
        d.extend(x.clone());
    }
    NewOutbox {
        kind: OutboxKind::Event,
        topic: topic.into(),
        merchant_id: Some(p.merchant_id),
        resource_type: "payment".into(),
        resource_id: p.id.to_string(),
        payload: data,
        occurred_at: now,
    }
}
