//! Wallet payments: the credentials that authorize a debit (OTP session, QR nonce, short
//! code), the debit itself, and its reversal by void or refund. Every function here runs
//! inside the caller's idempotent transaction; nothing in it commits on its own.
//!
//! Lock order, the same everywhere so two requests never wait on each other in a circle:
//! the credential (OTP session or QR nonce) or the payment first, then the wallet.
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Duration, Utc};
use entities::{otp_session, payment, payment_refund, qr_nonce, wallet, wallet_user};
use rand::Rng;
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::json;
use uuid::Uuid;

use super::{
    caller::Caller,
    cashback, checkout,
    credential_codes::{nonce_hash, short_code_hash},
    credentials::{Principal, scope},
    enrollment,
    events::{NewOutbox, OutboxKind},
    job_requests::{self, SmsRequest},
    ledger::{self, DebitPlan, PostingKind, RefundPlan},
    rewards,
    wallets::{self, Balance},
};
use crate::{
    error::{ApiError, ErrorCode, RateLimitInfo},
    infra::crypto::Sealer,
    infra::kv::Kv,
    store::{self, writes::Writes},
};

pub const OTP_TTL_SECS: i64 = 300;
pub const OTP_MAX_SENDS: usize = 3;
/// Failed short-code payments per integration per minute before RATE_LIMITED: a short code
/// has about 28 million values, so guessing must stay slow.
pub const SHORT_CODE_FAILURES_PER_MIN: u64 = 20;
pub const OTP_SEND_WINDOW_SECS: i64 = 300;
pub const OTP_MAX_WRONG: i32 = 3;
pub const QR_TTL_SECS: i64 = 300;
const QR_PREFIX: &str = "wq1.";
/// Short codes avoid letters and digits that read alike (0/O, 1/I/L).
const SHORT_CODE_ALPHABET: &[u8] = b"23456789ABCDEFGHJKMNPQRSTUVWXYZ";

/// How the customer is named in a mint.
#[derive(Clone, Debug)]
pub enum Customer {
    Phone(String),
    WalletUser(Uuid),
}

async fn identity<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    customer: &Customer,
) -> Result<wallet_user::Model, ApiError> {
    match customer {
        Customer::Phone(p) => store::wallets::find_identity_by_phone(c, merchant_id, p).await?,
        Customer::WalletUser(id) => store::wallets::find_identity(c, merchant_id, *id).await?,
    }
    .ok_or_else(|| ApiError::not_found("Wallet"))
}

fn pending_proof() -> ApiError {
    ApiError::forbidden(
        "The customer has not completed phone proof; the wallet cannot pay until enrollment is verified.",
    )
}

// ---------------------------------------------------------------------------------------
// OTP send

#[derive(Clone, Debug)]
pub struct OtpSend {
    pub phone: String,
    pub amount_minor: i64,
    pub currency: String,
    pub order_ref: String,
    pub wallet_program_id: Option<Uuid>,
    /// Across orders, one customer's phone gets at most this many codes per window, so
    /// nobody can mint sessions without end by varying the order reference.
    pub max_sends_per_wallet: u64,
}

#[derive(Clone, Debug)]
pub struct OtpSent {
    pub session: otp_session::Model,
    pub wallet: wallet::Model,
    pub phone: String,
    pub sends_remaining: usize,
}

/// An E.164 number with all but its last three digits hidden, for receipts and logs.
pub fn masked(p: &str) -> String {
    let digits = p.trim_start_matches('+');
    let shown = digits.len().min(3);
    format!(
        "+{}{}",
        "*".repeat(digits.len() - shown),
        &digits[digits.len() - shown..]
    )
}

/// Mints an OTP session bound to (wallet, order, amount, currency) and queues its SMS. At
/// most three sends per order in five minutes; the fourth is RATE_LIMITED until the oldest
/// leaves the window.
pub async fn send_otp<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    req: OtpSend,
    now: DateTime<Utc>,
) -> Result<OtpSent, ApiError> {
    let merchant = caller.acting.merchant_id;
    super::currencies::require_currency(c, merchant, &req.currency).await?;
    let who = identity(c, merchant, &Customer::Phone(req.phone.clone())).await?;
    // A PENDING_PROOF wallet still gets its code: the payment is where it is refused.
    let chosen =
        wallets::choose_wallet(c, &who, Some(&req.currency), req.wallet_program_id).await?;
    // Sends for one wallet queue here, so the window count below cannot be raced.
    let w = store::wallets::lock_wallet(c, merchant, chosen.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let window = Duration::seconds(OTP_SEND_WINDOW_SECS);
    let sends = store::payments::otp_sends_since(c, merchant, &req.order_ref, now - window).await?;
    let limited = |limit: u64, retry: u64| {
        ApiError::rate_limited(
            RateLimitInfo {
                limit,
                remaining: 0,
                reset_secs: retry,
                window_secs: OTP_SEND_WINDOW_SECS as u64,
            },
            retry,
        )
    };
    if sends.len() >= OTP_MAX_SENDS {
        let frees_at = sends[0] + window;
        return Err(limited(
            OTP_MAX_SENDS as u64,
            (frees_at - now).num_seconds().max(1) as u64,
        ));
    }
    if store::payments::otp_sends_for_wallet_since(c, w.id, now - window).await?
        >= req.max_sends_per_wallet
    {
        return Err(limited(
            req.max_sends_per_wallet,
            OTP_SEND_WINDOW_SECS as u64,
        ));
    }
    let code = format!("{:06}", rand::rng().random_range(0..1_000_000u32));
    let id = Uuid::now_v7();
    let session = otp_session::Model {
        id,
        merchant_id: merchant,
        wallet_id: w.id,
        order_ref: req.order_ref.clone(),
        amount_minor: req.amount_minor,
        currency: req.currency.clone(),
        code_hash: sealer.mac("otp", format!("{id}:{code}").as_bytes()),
        failed_attempts: 0,
        status: "active".into(),
        payment_id: None,
        expires_at: now + Duration::seconds(OTP_TTL_SECS),
        created_at: now,
        consumed_at: None,
    };
    store::payments::insert_otp(c, session.clone()).await?;
    job_requests::send_sms(
        c,
        sealer,
        SmsRequest {
            integration_id: caller.integration_id,
            merchant_id: Some(merchant),
            is_sandbox: caller.is_sandbox,
            phone: who.phone.clone(),
            kind: "otp".into(),
            body: format!(
                "Your payment code is {code}. It confirms a payment of {} {} for order {}. Valid 5 minutes. Never share it.",
                format_minor(req.amount_minor),
                req.currency,
                req.order_ref
            ),
            code: Some(code),
            verification_token: None,
        },
    )
    .await?;
    Ok(OtpSent {
        session,
        wallet: w,
        phone: who.phone,
        sends_remaining: OTP_MAX_SENDS - sends.len() - 1,
    })
}

/// Minor units shown with two decimals in an SMS (display only; never parsed back).
fn format_minor(m: i64) -> String {
    format!("{}.{:02}", m / 100, m % 100)
}

// ---------------------------------------------------------------------------------------
// QR mint

#[derive(Clone, Debug)]
pub struct QrMint {
    /// Named by the caller; `None`: the customer the checkout session identified.
    pub customer: Option<Customer>,
    pub service_session_id: Option<Uuid>,
    pub with_short_code: bool,
    pub wallet_program_id: Option<Uuid>,
}

#[derive(Clone, Debug)]
pub struct QrMinted {
    pub nonce: qr_nonce::Model,
    pub qr_payload: String,
    pub short_code: Option<String>,
    pub wallet: wallet::Model,
}

/// A new single-use nonce for the customer's wallet; every earlier one still usable is
/// superseded (payments already in flight with it still pass: see `usable_nonce`).
pub async fn mint_qr<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    req: QrMint,
    now: DateTime<Utc>,
) -> Result<QrMinted, ApiError> {
    let merchant = caller.acting.merchant_id;
    // The session is the caller's, open and (unless the body names the customer)
    // identified; its program is the default choice.
    let session = match req.service_session_id {
        Some(id) => Some(checkout::hold(c, caller, id, now).await?),
        None => None,
    };
    let customer = match (req.customer, &session) {
        (Some(named), _) => named,
        (None, Some(s)) => Customer::WalletUser(checkout::identified_customer(s)?),
        (None, None) => {
            return Err(ApiError::field(
                "/context/service_session_id",
                "required",
                "name the checkout session the customer was identified in, or the customer",
            ));
        }
    };
    let found = identity(c, merchant, &customer).await?;
    if let Some(s) = &session {
        checkout::check_customer(s, found.id, "/customer")?;
    }
    let program = req
        .wallet_program_id
        .or(session.as_ref().and_then(|s| s.wallet_program_id));
    // Mints for one customer queue on the identity, so two concurrent mints cannot each
    // miss the other's nonce and leave two live.
    let who = store::wallets::lock_identity(c, merchant, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let w = wallets::choose_wallet(c, &who, None, program).await?;
    store::payments::supersede_qr(c, w.id, now).await?;
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(ApiError::internal)?;
    let qr_payload = format!("{QR_PREFIX}{}", URL_SAFE_NO_PAD.encode(raw));
    let short_code = if req.with_short_code {
        let mut found = None;
        for _ in 0..8 {
            let code: String = {
                let mut rng = rand::rng();
                (0..5)
                    .map(|_| {
                        SHORT_CODE_ALPHABET[rng.random_range(0..SHORT_CODE_ALPHABET.len())] as char
                    })
                    .collect()
            };
            let hash = short_code_hash(sealer, merchant, &code);
            if !store::payments::short_code_in_use(c, merchant, &hash, now).await? {
                found = Some(code);
                break;
            }
        }
        Some(found.ok_or_else(|| ApiError::conflict("No free short code; retry."))?)
    } else {
        None
    };
    let nonce = qr_nonce::Model {
        id: Uuid::now_v7(),
        merchant_id: merchant,
        wallet_id: w.id,
        nonce_hash: nonce_hash(&qr_payload),
        short_code_hash: short_code
            .as_deref()
            .map(|code| short_code_hash(sealer, merchant, code)),
        expires_at: now + Duration::seconds(QR_TTL_SECS),
        superseded_at: None,
        consumed_at: None,
        payment_id: None,
        created_at: now,
    };
    store::payments::insert_qr(c, nonce.clone()).await?;
    Ok(QrMinted {
        nonce,
        qr_payload,
        short_code,
        wallet: w,
    })
}

/// A nonce pays once, before it expires, and only if it was not replaced before the payment
/// arrived: a re-mint while a payment is in flight does not cancel that payment.
pub fn usable_nonce(n: &qr_nonce::Model, received_at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    n.consumed_at.is_none() && n.expires_at > now && n.superseded_at.is_none_or(|s| s > received_at)
}

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

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct BasketLine {
    pub sku: String,
    pub quantity: f64,
    pub unit_price_minor: i64,
    pub extended_price_minor: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_minor: Option<i64>,
}

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

/// What the basket says about the amount: its total, whether it disagrees with the debit
/// (the payment is then flagged for reconciliation, never adjusted), and how complete the
/// partner's data was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasketCheck {
    pub total_minor: Option<i64>,
    pub diverges: bool,
    pub completeness: i32,
}

pub fn check_basket(pay: &Pay, caller: &Caller) -> BasketCheck {
    let mut score = 40;
    if pay.order_ref.is_some() {
        score += 10;
    }
    if caller.acting.branch_id.is_some() {
        score += 5;
    }
    if caller.terminal_id.is_some() {
        score += 5;
    }
    let Some(lines) = pay.basket.as_ref().filter(|l| !l.is_empty()) else {
        return BasketCheck {
            total_minor: None,
            diverges: false,
            completeness: score,
        };
    };
    score += 25;
    if lines.iter().all(|l| l.category.is_some()) {
        score += 15;
    }
    let total: i64 = lines
        .iter()
        .map(|l| l.extended_price_minor - l.discount_minor.unwrap_or(0))
        .sum();
    let lines_disagree = lines.iter().any(|l| {
        let expected = l.quantity * l.unit_price_minor as f64;
        (expected - l.extended_price_minor as f64).abs() >= 1.0
    });
    BasketCheck {
        total_minor: Some(total),
        diverges: total != pay.amount_minor || lines_disagree,
        completeness: score,
    }
}

/// `details.reason` of a wrong code (counted by `verify_otp`).
pub const WRONG_OTP: &str = "wrong_code";

pub(crate) fn otp_invalid(reason: &str, message: &str) -> ApiError {
    ApiError::new(ErrorCode::OtpInvalid, message).with_details(json!({ "reason": reason }))
}

pub(crate) fn replayed(message: &str) -> ApiError {
    ApiError::new(ErrorCode::CredentialExpiredOrReplayed, message)
}

/// Checks the credential and consumes it, in the payment's transaction (a later failure
/// rolls the consumption back with the rest), in the statement that locks its wallet:
/// payments of one wallet queue on its lock for as few round trips as possible. Returns the
/// wallet, locked, with what the payment reads of it.
async fn take_credential<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    merchant: Uuid,
    pay: &Pay,
    payment_id: Uuid,
    now: DateTime<Utc>,
) -> Result<store::wallets::ForPayment, ApiError> {
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
            s.status = "active".into();
            check_session(&s, pay, now)?;
            if !sealer.verify_mac(
                "otp",
                format!("{}:{otp_code}", s.id).as_bytes(),
                &s.code_hash,
            ) {
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
                payment_id,
                pay.received_at,
                now,
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
                payment_id,
                pay.received_at,
                now,
            )
            .await?
            .ok_or_else(|| replayed("Unknown, expired or already used short code; mint a new one."))
        }
    }
}

/// A completed (or later voided) payment with the balance right after it.
pub struct Paid {
    pub payment: payment::Model,
    pub balance_after: Balance,
    /// The CASHBACK grant the payment earned under its program's rule, if any.
    pub cashback: Option<entities::promo_grant::Model>,
    /// The payment's writes, not yet sent: the caller flushes them before it commits.
    pub writes: Writes,
}

fn split_json(grants: &[(Uuid, i64)]) -> serde_json::Value {
    json!(
        grants
            .iter()
            .map(|(g, a)| json!([g.to_string(), a]))
            .collect::<Vec<_>>()
    )
}

fn split_from_json(v: &serde_json::Value) -> Vec<(Uuid, i64)> {
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
fn balance_after_debit(
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
/// posting and its events, all in the caller's transaction. `turn`, the caller's place in
/// the wallet's line, is given up as soon as the wallet is locked: the next payment of the
/// wallet can then do everything up to the lock while this one finishes.
pub async fn pay<C: ConnectionTrait, Turn: Send>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    pay: Pay,
    turn: Option<Turn>,
) -> Result<Paid, ApiError> {
    let now = Utc::now();
    let merchant = caller.acting.merchant_id;
    let payment_id = Uuid::now_v7();
    // The session first (it is first in the lock order): two payments in one session
    // queue here, and the second finds it closed. Its state is checked after the
    // credential, whose error tells the cashier what to do (a used QR nonce of a completed
    // session: mint a new one); what the credential took is rolled back with the error.
    let session = match pay.service_session_id {
        Some(id) => Some(checkout::hold_any_state(c, caller, id).await?),
        None => None,
    };
    let store::wallets::ForPayment {
        wallet: w,
        owner: who,
        rule,
        grants,
    } = take_credential(c, sealer, merchant, &pay, payment_id, now).await?;
    drop(turn);
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
    // The payment's own writes need nothing back: they are held and go to the database
    // in one batch with the idempotency record (see `store::writes`). Nothing below reads
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
        },
    )?;
    let basket = check_basket(&pay, caller);
    let p = payment::Model {
        id: payment_id,
        merchant_id: merchant,
        integration_id: caller.integration_id,
        branch_id: caller.acting.branch_id,
        terminal_id: caller.terminal_id.clone(),
        cashier_id: caller.acting.cashier_id.clone(),
        wallet_id: w.id,
        status: "completed".into(),
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
    let cashback = cashback::accrue(c, rule, &p, &w, now).await?;
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
               "decision_trace_id": caller.decision_trace_id}),
        now,
    )];
    if let Some(a) = &cashback {
        events.extend(a.events.iter().cloned());
    }
    events.push(wallets::balance_changed(&w, &after, "payment", p.id, now));
    store::outbox::defer_all(&mut writes, events);
    Ok(Paid {
        payment: p,
        balance_after: after,
        cashback: cashback.map(|a| a.grant),
        writes,
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
        super::currencies::require_currency(c, w.merchant_id, currency).await?;
        return Err(ApiError::currency_not_supported(std::slice::from_ref(
            &w.currency,
        )));
    }
    Ok(())
}

fn payment_event(
    topic: &str,
    p: &payment::Model,
    extra: serde_json::Value,
    now: DateTime<Utc>,
) -> NewOutbox {
    let mut data = json!({
        "payment_id": p.id.to_string(),
        "wallet_id": p.wallet_id.to_string(),
        "status": p.status,
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

/// The session's state, expiry and binding to this payment, in that order. An expired
/// session is OTP_EXPIRED even when it was locked, so a client never waits on a dead one.
fn check_session(s: &otp_session::Model, pay: &Pay, now: DateTime<Utc>) -> Result<(), ApiError> {
    check_session_for(
        s,
        pay.amount_minor,
        &pay.currency,
        Some(pay.order_ref.as_deref()),
        now,
    )
}

/// Whether an OTP session can still pay `amount_minor` in `currency` (and, unless
/// `order_ref` is None, for that effective order reference), as the payment's error.
pub(crate) fn check_session_for(
    s: &otp_session::Model,
    amount_minor: i64,
    currency: &str,
    order_ref: Option<Option<&str>>,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    if s.status == "consumed" {
        return Err(ApiError::new(
            ErrorCode::OtpExpired,
            "This OTP was already used; send a new one.",
        ));
    }
    if s.expires_at <= now {
        return Err(ApiError::new(
            ErrorCode::OtpExpired,
            "The OTP expired; send a new one.",
        ));
    }
    if s.status == "locked" {
        let left = (s.expires_at - now).num_seconds().max(1) as u64;
        return Err(ApiError::rate_limited(
            RateLimitInfo {
                limit: OTP_MAX_WRONG as u64,
                remaining: 0,
                reset_secs: left,
                window_secs: OTP_TTL_SECS as u64,
            },
            left,
        )
        .with_message("Three wrong codes locked this OTP session; send a new OTP."));
    }
    let mut mismatched = Vec::new();
    if order_ref.is_some_and(|r| r != Some(s.order_ref.as_str())) {
        mismatched.push("order_ref");
    }
    if amount_minor != s.amount_minor {
        mismatched.push("amount_minor");
    }
    if currency != s.currency {
        mismatched.push("currency");
    }
    if !mismatched.is_empty() {
        return Err(ApiError::new(
            ErrorCode::OtpInvalid,
            "The OTP was sent for another order, amount or currency.",
        )
        .with_details(json!({"reason": "session_mismatch", "fields": mismatched})));
    }
    Ok(())
}

async fn code_matches<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    merchant: Uuid,
    s: &otp_session::Model,
    phone: &str,
    code: &str,
) -> Result<bool, ApiError> {
    let owner = store::wallets::find_wallet_with_owner(c, merchant, s.wallet_id).await?;
    let phone_ok = owner.is_some_and(|(_, who)| who.phone == phone);
    let code_ok = sealer.verify_mac("otp", format!("{}:{code}", s.id).as_bytes(), &s.code_hash);
    Ok(phone_ok && code_ok)
}

/// Checks an OTP before the payment runs, in a transaction of its own that holds the
/// session's row lock: a wrong code is counted and committed before the lock is released,
/// so concurrent guesses queue and the third wrong one locks the session for all of them.
/// Runs as a task of its own, so a caller that hangs up cannot abort the count. A right
/// code changes nothing here; the payment consumes the session with the debit.
pub async fn verify_otp(
    db: &DatabaseConnection,
    sealer: &Sealer,
    merchant: Uuid,
    pay: &Pay,
) -> Result<Option<Uuid>, ApiError> {
    let Credential::Otp {
        phone,
        otp_code,
        otp_session_id,
    } = pay.credential.clone()
    else {
        return Ok(None);
    };
    let (db, sealer, pay) = (db.clone(), sealer.clone(), pay.clone());
    let task = tokio::spawn(async move {
        let now = Utc::now();
        let txn = store::begin(&db).await?;
        let s = store::payments::lock_otp(&txn, merchant, otp_session_id)
            .await?
            .ok_or_else(|| otp_invalid("unknown_session", "Unknown OTP session."))?;
        check_session(&s, &pay, now)?;
        if code_matches(&txn, &sealer, merchant, &s, &phone, &otp_code).await? {
            return Ok(Some(s.wallet_id));
        }
        let attempts = store::payments::record_wrong_otp(&txn, s, OTP_MAX_WRONG).await?;
        txn.commit().await?;
        let remaining = attempts.map(|a| (OTP_MAX_WRONG - a).max(0));
        Err(ApiError::new(
            ErrorCode::OtpInvalid,
            match remaining {
                Some(0) => "Wrong OTP. The session is now locked; send a new OTP.",
                _ => "Wrong OTP.",
            },
        )
        .with_details(json!({"reason": WRONG_OTP, "attempts_remaining": remaining})))
    });
    task.await.map_err(ApiError::internal)?
}

/// RATE_LIMITED while the integration has too many recent failed short-code payments.
pub async fn short_code_guard(kv: &Kv, integration: Uuid) -> Result<(), ApiError> {
    let count = kv
        .get(&short_code_failures_key(integration))
        .await?
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if count >= SHORT_CODE_FAILURES_PER_MIN {
        return Err(ApiError::rate_limited(
            RateLimitInfo {
                limit: SHORT_CODE_FAILURES_PER_MIN,
                remaining: 0,
                reset_secs: 60,
                window_secs: 60,
            },
            60,
        )
        .with_message("Too many failed short codes; wait, or pay by QR or OTP."));
    }
    Ok(())
}

/// Counts one failed short-code payment of the integration.
pub async fn short_code_failed(kv: &Kv, integration: Uuid) -> Result<(), ApiError> {
    kv.incr_window(
        &short_code_failures_key(integration),
        std::time::Duration::from_secs(60),
    )
    .await
    .map(|_| ())
}

fn short_code_failures_key(integration: Uuid) -> String {
    format!("shortcode:fail:{integration}")
}

// ---------------------------------------------------------------------------------------
// Read, void, refund

/// Whether `principal` may see or act on `p`: the integration that took it, within the
/// credential's merchant, brand and branch scope.
pub async fn visible<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    p: &payment::Model,
) -> Result<bool, ApiError> {
    if p.integration_id != principal.integration_id {
        return Ok(false);
    }
    match scope::authorize(c, principal, p.merchant_id, p.branch_id).await {
        Ok(acting) => Ok(p.branch_id.is_some() || acting.branch_id.is_none()),
        Err(e) if e.code() == ErrorCode::Forbidden => Ok(false),
        Err(e) => Err(e),
    }
}

/// A payment the caller may see, or NOT_FOUND (another tenant's looks the same).
pub async fn find_visible<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    id: Uuid,
) -> Result<payment::Model, ApiError> {
    let not_found = || ApiError::not_found("Payment");
    let p = store::payments::find(c, id).await?.ok_or_else(not_found)?;
    if visible(c, principal, &p).await? {
        Ok(p)
    } else {
        Err(not_found())
    }
}

pub async fn refunds_of<C: ConnectionTrait>(
    c: &C,
    payment_id: Uuid,
) -> Result<Vec<payment_refund::Model>, ApiError> {
    Ok(store::payments::refunds_of(c, payment_id).await?)
}

#[derive(Clone, Debug)]
pub struct Reversal {
    pub payment: payment::Model,
    /// What the reversal took back of the payment's rewards (cashback, an offer's).
    pub rewards: rewards::Reversed,
    /// None when a void found the payment already voided (a no-op).
    pub refund: Option<payment_refund::Model>,
    pub balance_after: Balance,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReversalKind {
    Void,
    Refund,
}

/// Void (the whole payment, only before any refund) or refund (`amount`, default all that
/// is left). Never returns more than was paid across all refunds: the payment row is locked,
/// so concurrent refunds queue and each sees what the others returned. Promotional parts go
/// back to their grant while it can still hold credit, else to the merchant's forfeit
/// account.
#[allow(clippy::too_many_arguments)]
pub async fn reverse<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    caller: &Caller,
    payment_id: Uuid,
    kind: ReversalKind,
    amount: Option<i64>,
    currency: Option<&str>,
    reason: Option<String>,
) -> Result<Reversal, ApiError> {
    let now = Utc::now();
    let merchant = caller.acting.merchant_id;
    let p = store::payments::lock(c, merchant, payment_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Payment"))?;
    if !visible(c, principal, &p).await? {
        return Err(ApiError::not_found("Payment"));
    }
    if currency.is_some_and(|cur| cur != p.currency) {
        return Err(ApiError::field(
            "/currency",
            "currency_mismatch",
            format!("must be the payment's currency, {}", p.currency),
        ));
    }
    let w = store::wallets::lock_wallet(c, merchant, p.wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    if p.status == "voided" {
        if kind == ReversalKind::Void {
            let balance_after = wallets::current_balance(c, &w).await?;
            return Ok(Reversal {
                payment: p,
                rewards: rewards::Reversed::default(),
                refund: None,
                balance_after,
            });
        }
        return Err(ApiError::conflict(
            "The payment was voided; nothing is left to refund.",
        ));
    }
    let earlier = store::payments::refunds_of(c, p.id).await?;
    if kind == ReversalKind::Void && !earlier.is_empty() {
        return Err(ApiError::field(
            "/",
            "partially_refunded",
            "the payment was partly refunded; refund the remainder instead of voiding it",
        ));
    }
    let paid = DebitPlan {
        from_grants: split_from_json(&p.promo_split),
        from_actual: p.debited_actual_minor,
    };
    let mut returned = DebitPlan::default();
    for r in &earlier {
        returned.from_actual += r.to_actual_minor;
        returned.from_grants.extend(split_from_json(&r.to_grants));
    }
    let left = p.amount_minor - p.refunded_minor;
    let amount = amount.unwrap_or(left);
    let grant_ids: Vec<Uuid> = paid.from_grants.iter().map(|(g, _)| *g).collect();
    let grants = store::wallets::grants_by_ids(c, &grant_ids).await?;
    let views: Vec<_> = grants.iter().map(wallets::grant_view).collect();
    let plan: RefundPlan =
        ledger::plan_refund(&paid, &returned, &views, amount, now).ok_or_else(|| {
            ApiError::field(
                "/amount_minor",
                "exceeds_refundable",
                format!("must be between 1 and the refundable amount, {left}"),
            )
        })?;
    // What the refund returns to the wallet (a part whose grant ended is forfeited, not
    // returned); the reward it takes back is left out, so the check errs on the safe side.
    let back = plan.to_actual.saturating_add(plan.promo_returned());
    wallets::ensure_room(c, &w, back, "/amount_minor").await?;
    let posting_kind = match kind {
        ReversalKind::Void => PostingKind::Void,
        ReversalKind::Refund => PostingKind::Refund,
    };
    let refund_id = Uuid::now_v7();
    let posting = ledger::posting::refund(posting_kind, merchant, w.id, &w.currency, &plan);
    let posting_id = store::ledger::post(
        c,
        &posting,
        store::ledger::Reference {
            kind: posting_kind.as_str(),
            id: refund_id,
            memo: reason.clone(),
        },
    )
    .await?;
    let refund = payment_refund::Model {
        id: refund_id,
        payment_id: p.id,
        integration_id: p.integration_id,
        merchant_id: merchant,
        kind: posting_kind.as_str().into(),
        amount_minor: amount,
        to_actual_minor: plan.to_actual,
        to_grants: split_json(&plan.as_returned().from_grants),
        forfeited_promo_minor: plan.forfeited_promo(),
        reason,
        posting_id,
        created_at: now,
    };
    store::payments::insert_refund(c, refund.clone()).await?;
    let voided_at = (kind == ReversalKind::Void).then_some(now);
    store::payments::set_refunded(c, p.id, p.refunded_minor + amount, voided_at, now).await?;
    let mut p = p;
    p.refunded_minor += amount;
    if let Some(at) = voided_at {
        p.status = "voided".into();
        p.voided_at = Some(at);
    }
    p.updated_at = now;
    let mut reversed = rewards::reverse(
        c,
        &p,
        match kind {
            ReversalKind::Void => "payment_voided",
            ReversalKind::Refund => "payment_refunded",
        },
        now,
    )
    .await?;
    let refilled: Vec<Uuid> = plan.to_grants.iter().map(|(g, _)| *g).collect();
    reversed
        .events
        .extend(rewards::recover(c, &refilled, now).await?);
    let w = store::wallets::find_wallet(c, merchant, w.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let balance_after = wallets::current_balance(c, &w).await?;
    let (topic, cause) = match kind {
        ReversalKind::Void => ("payment.reversed", "void"),
        ReversalKind::Refund => ("payment.refunded", "refund"),
    };
    let mut events = vec![payment_event(
        topic,
        &p,
        json!({
            "refund_id": refund_id.to_string(),
            "returned_minor": amount,
            "returned_actual_minor": plan.to_actual,
            "returned_promo_minor": plan.promo_returned(),
            "forfeited_promo_minor": plan.forfeited_promo(),
            "cashback_reversed_minor": reversed.cashback_minor,
            "offer_reward_reversed_minor": reversed.offer_minor,
            "rewards_unrecovered_minor": reversed.unrecovered_minor,
        }),
        now,
    )];
    events.append(&mut reversed.events);
    events.push(wallets::balance_changed(
        &w,
        &balance_after,
        cause,
        refund_id,
        now,
    ));
    store::outbox::append_all(c, events).await?;
    Ok(Reversal {
        payment: p,
        rewards: reversed,
        refund: Some(refund),
        balance_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nonce(superseded: Option<i64>, consumed: bool, expires_in: i64) -> qr_nonce::Model {
        let now = Utc::now();
        qr_nonce::Model {
            id: Uuid::now_v7(),
            merchant_id: Uuid::now_v7(),
            wallet_id: Uuid::now_v7(),
            nonce_hash: String::new(),
            short_code_hash: None,
            expires_at: now + Duration::seconds(expires_in),
            superseded_at: superseded.map(|s| now + Duration::seconds(s)),
            consumed_at: consumed.then_some(now),
            payment_id: None,
            created_at: now,
        }
    }

    #[test]
    fn a_nonce_replaced_after_the_payment_arrived_still_pays_one_replaced_before_does_not() {
        let now = Utc::now();
        let received = now - Duration::seconds(1);
        assert!(usable_nonce(&nonce(None, false, 60), received, now));
        assert!(usable_nonce(&nonce(Some(0), false, 60), received, now));
        assert!(!usable_nonce(&nonce(Some(-5), false, 60), received, now));
        assert!(!usable_nonce(&nonce(None, true, 60), received, now));
        assert!(!usable_nonce(&nonce(None, false, -1), received, now));
    }

    #[test]
    fn masked_phones_keep_only_the_last_three_digits() {
        assert_eq!(masked("+4915112345678"), "+**********678");
    }
}
