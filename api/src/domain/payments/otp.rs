//! OTP payments: a code texted to the customer's phone, bound to one order, amount and
//! currency, and its check when the payment presents it.
use crate::store::Db;
use chrono::{DateTime, Duration, Utc};
use entities::{otp_session, otp_session::OtpSessionStatus, wallet};
use rand::Rng;
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::payments::{
    Credential, Customer, OTP_MAX_SENDS, OTP_MAX_WRONG, OTP_SEND_WINDOW_SECS, OTP_TTL_SECS, Pay,
    WRONG_OTP, identity, otp_invalid,
};

use crate::{
    domain::{
        credentials::scope::Acting,
        customers::wallets,
        outbox::job_requests::{self, SmsRequest},
    },
    error::{ApiError, ErrorCode, RateLimitInfo},
    infra::crypto::Sealer,
    store,
};

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

/// Mints an OTP session bound to (wallet, order, amount, currency) and queues its SMS. At
/// most three sends per order in five minutes; the fourth is RATE_LIMITED until the oldest
/// leaves the window.
pub async fn send_otp<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    req: OtpSend,
    now: DateTime<Utc>,
) -> Result<OtpSent, ApiError> {
    let merchant = acting.merchant_id;
    crate::domain::platform::currencies::require_currency(c, merchant, &req.currency).await?;
    let who = identity(c, merchant, &Customer::Phone(req.phone.clone())).await?;
    // A PENDING_PROOF wallet still gets its code: the payment is where it is refused.
    let chosen =
        wallets::choose_wallet(c, &who, Some(&req.currency), req.wallet_program_id).await?;
    // Sends for one wallet queue here, so the window count below cannot be raced.
    let w = store::customers::wallets::lock_wallet(c, merchant, chosen.id)
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
        status: OtpSessionStatus::Active,
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
            integration_id: acting.integration_id,
            merchant_id: Some(merchant),
            is_sandbox: acting.is_sandbox,
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
pub(super) fn format_minor(m: i64) -> String {
    format!("{}.{:02}", m / 100, m % 100)
}

/// The session's state, expiry and binding to this payment, in that order. An expired
/// session is OTP_EXPIRED even when it was locked, so a client never waits on a dead one.
pub(super) fn check_session(
    s: &otp_session::Model,
    pay: &Pay,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
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
    if s.status == OtpSessionStatus::Consumed {
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
    if s.status == OtpSessionStatus::Locked {
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

pub(super) async fn code_matches<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    merchant: Uuid,
    s: &otp_session::Model,
    phone: &str,
    code: &str,
) -> Result<bool, ApiError> {
    let owner = store::customers::wallets::find_wallet_with_owner(c, merchant, s.wallet_id).await?;
    let phone_ok = owner.is_some_and(|(_, who)| who.phone == phone);
    Ok(phone_ok && code_is(sealer, s, code))
}

/// Whether `code` is the one texted for session `s` (constant-time).
pub(super) fn code_is(sealer: &Sealer, s: &otp_session::Model, code: &str) -> bool {
    sealer.verify_mac("otp", format!("{}:{code}", s.id).as_bytes(), &s.code_hash)
}

/// An OTP `verify_otp` found right: the session's wallet, and the digest the payment's code
/// matched. The payment reads the session again under its lock; when that row still holds
/// this digest, the code is known to match it, and its HMAC need not be computed again.
pub struct CheckedOtp {
    pub wallet_id: Uuid,
    session_id: Uuid,
    code_hash: String,
}

impl CheckedOtp {
    fn of(s: &otp_session::Model) -> Self {
        CheckedOtp {
            wallet_id: s.wallet_id,
            session_id: s.id,
            code_hash: s.code_hash.clone(),
        }
    }

    /// Whether `s` is the session checked, holding the digest the code matched
    /// (constant-time, as any comparison with a secret's digest).
    pub(super) fn vouches_for(&self, s: &otp_session::Model) -> bool {
        use subtle::ConstantTimeEq;
        self.session_id == s.id
            && bool::from(self.code_hash.as_bytes().ct_eq(s.code_hash.as_bytes()))
    }
}

/// Checks an OTP before the payment runs. A wrong code is counted in a transaction of its
/// own that holds the session's row lock, and committed before the lock is released, so
/// concurrent guesses queue and the third wrong one locks the session for all of them.
/// That runs as a task of its own, so a caller that hangs up cannot abort the count. A
/// right code changes nothing here; the payment consumes the session with the debit.
///
/// A right code needs no lock: it is first looked at without one, and only a look that
/// would not let the payment go on (unknown, spent, locked or expired session, another
/// order, a wrong phone or code) takes the locked path, which decides and counts. What
/// the look let through the payment checks again under its own lock, so a session spent
/// or locked meanwhile fails there as it would have here.
pub async fn verify_otp(
    db: &Db,
    sealer: &Sealer,
    merchant: Uuid,
    pay: &Pay,
    clock: crate::domain::sandbox::clock::Clock,
) -> Result<Option<CheckedOtp>, ApiError> {
    let Credential::Otp {
        phone,
        otp_code,
        otp_session_id,
    } = &pay.credential
    else {
        return Ok(None);
    };
    if let Some((s, owner_phone)) =
        store::payments::find_otp_with_owner_phone(db, merchant, *otp_session_id).await?
        && check_session(&s, pay, clock.now()).is_ok()
        && owner_phone == *phone
        && code_is(sealer, &s, otp_code)
    {
        return Ok(Some(CheckedOtp::of(&s)));
    }
    let asked = (phone.clone(), otp_code.clone(), *otp_session_id);
    verify_otp_locked(db, sealer, merchant, pay, asked, clock).await
}

/// `verify_otp` under the session's lock: decides, and counts a wrong code. `asked` is the
/// credential's phone, code and session.
async fn verify_otp_locked(
    db: &Db,
    sealer: &Sealer,
    merchant: Uuid,
    pay: &Pay,
    (phone, otp_code, otp_session_id): (String, String, Uuid),
    clock: crate::domain::sandbox::clock::Clock,
) -> Result<Option<CheckedOtp>, ApiError> {
    let (db, sealer, pay) = (db.clone(), sealer.clone(), pay.clone());
    let task = tokio::spawn(async move {
        let now = clock.now();
        let txn = store::begin(&db).await?;
        let s = store::payments::lock_otp(&txn, merchant, otp_session_id)
            .await?
            .ok_or_else(|| otp_invalid("unknown_session", "Unknown OTP session."))?;
        check_session(&s, &pay, now)?;
        if code_matches(&txn, &sealer, merchant, &s, &phone, &otp_code).await? {
            return Ok(Some(CheckedOtp::of(&s)));
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
