//! Enrollment: proving a customer's phone, and what proof unlocks.
//!
//! A wallet identity is PENDING_PROOF until the customer proves the phone, either by the
//! 6-digit code the cashier keys in or by the signed link in the SMS. Each pending identity
//! has one open window (an `enrollments` row) with a deadline; it is opened by
//! `POST /enroll/initiate`, or by a credit for a phone the merchant does not know yet (a
//! proto-wallet), or by an operator import. Proof (verify) releases the LOCKED grants and
//! links the POS provider's customer id in one transaction.
//!
//! When a window lapses (the sweep in the worker), the identity becomes EXPIRED: it can no
//! longer pay and identifies as not_found. Its actual money moves into the merchant's
//! escrow account for that wallet (never out of the ledger) and its LOCKED grants stay
//! LOCKED until their own expiry. A later initiate for the same phone opens a new window;
//! its verification returns the escrowed money to the wallet and releases what is still
//! unexpired.
//!
//! Lock order: the identity, then the enrollment, then the identity's wallets.
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Duration, Utc};
use entities::{enrollment, promo_grant, wallet, wallet_user};
use rand::Rng;
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::json;
use uuid::Uuid;

use super::{
    caller::Caller,
    customers::{self, EXPIRED},
    events::NewOutbox,
    grant_events,
    job_requests::{self, SmsRequest},
    ledger::{self, Account},
    wallets::{self, Balance, PENDING_PROOF, VERIFIED},
};
use crate::{
    error::{ApiError, ErrorCode, RateLimitInfo},
    infra::crypto::Sealer,
    store,
};

/// A code is good for 15 minutes; the link for the whole window.
pub const CODE_TTL_SECS: i64 = 15 * 60;
/// Wrong codes before the code locks (a resend issues a new one).
pub const MAX_WRONG_CODES: i32 = 5;
/// SMS per window, the first one included.
pub const MAX_SENDS: i32 = 5;
/// Least time between two SMS of one window.
pub const RESEND_COOLDOWN_SECS: i64 = 60;
/// SMS languages with their own text; any other tag falls back to English.
pub const LANGUAGES: &[&str] = &["en", "de", "fr", "es"];
const TOKEN_PREFIX: &str = "ev1.";

pub use super::proof_window::{Origin, PENDING, credit_held_event, enrolled_event, open_window};
use super::proof_window::{event, new_enrollment};
pub const VERIFIED_STATUS: &str = "verified";
pub const EXPIRED_STATUS: &str = "expired";

/// Deployment settings enrollment needs.
#[derive(Clone, Debug)]
pub struct Policy {
    pub window: Duration,
    pub link_base: Option<String>,
}

fn code_hash(sealer: &Sealer, enrollment_id: Uuid, code: &str) -> String {
    sealer.mac(
        "enrollment_code",
        format!("{enrollment_id}:{code}").as_bytes(),
    )
}

fn token_mac(sealer: &Sealer, merchant: Uuid, enrollment_id: Uuid) -> String {
    sealer.mac(
        "enrollment_token",
        format!("{merchant}:{enrollment_id}").as_bytes(),
    )
}

/// The signed link token of an enrollment: its id and an HMAC over (merchant, id) under the
/// server secret. Single use because verification closes the enrollment.
pub fn token(sealer: &Sealer, e: &enrollment::Model) -> String {
    let mac = token_mac(sealer, e.merchant_id, e.id);
    format!(
        "{TOKEN_PREFIX}{}.{}",
        URL_SAFE_NO_PAD.encode(e.id.as_bytes()),
        mac
    )
}

/// The enrollment id a token names, if its signature holds for this merchant (so another
/// tenant's token is as invalid as a forged one).
pub fn parse_token(sealer: &Sealer, merchant: Uuid, token: &str) -> Option<Uuid> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, mac) = rest.split_once('.')?;
    let bytes = URL_SAFE_NO_PAD.decode(id).ok()?;
    let id = Uuid::from_slice(&bytes).ok()?;
    sealer
        .verify_mac(
            "enrollment_token",
            format!("{merchant}:{id}").as_bytes(),
            mac,
        )
        .then_some(id)
}

fn sms_body(language: Option<&str>, code: &str, link: Option<&str>) -> String {
    let lang = language
        .map(|l| {
            l.split(['-', '_'])
                .next()
                .unwrap_or("en")
                .to_ascii_lowercase()
        })
        .filter(|l| LANGUAGES.contains(&l.as_str()))
        .unwrap_or_else(|| "en".into());
    let (intro, or_open) = match lang.as_str() {
        "de" => (
            "Ihr Bestätigungscode für Ihr Wallet lautet",
            "oder öffnen Sie",
        ),
        "fr" => (
            "Votre code de confirmation du porte-monnaie est",
            "ou ouvrez",
        ),
        "es" => ("Su código de confirmación del monedero es", "o abra"),
        _ => ("Your wallet confirmation code is", "or open"),
    };
    match link {
        Some(l) => format!("{intro} {code} {or_open} {l}"),
        None => format!("{intro} {code}"),
    }
}

fn new_code() -> String {
    format!("{:06}", rand::rng().random_range(0..1_000_000u32))
}

/// Issues a new code (the previous one stops working), resets the wrong-code count and
/// queues the SMS with the code and the link, in the caller's transaction.
async fn send_code<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    policy: &Policy,
    e: &mut enrollment::Model,
    phone: &str,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let code = new_code();
    e.code_hash = Some(code_hash(sealer, e.id, &code));
    e.code_expires_at = Some(now + Duration::seconds(CODE_TTL_SECS));
    e.code_failed_attempts = 0;
    e.sends += 1;
    e.last_sent_at = Some(now);
    e.integration_id = Some(caller.integration_id);
    e.is_sandbox = caller.is_sandbox;
    e.terminal_id = caller.terminal_id.clone();
    e.updated_at = now;
    let token = token(sealer, e);
    let link = policy.link_base.as_deref().map(|b| {
        format!(
            "{b}{}token={token}",
            if b.contains('?') { '&' } else { '?' }
        )
    });
    job_requests::send_sms(
        c,
        sealer,
        SmsRequest {
            integration_id: caller.integration_id,
            merchant_id: Some(e.merchant_id),
            is_sandbox: caller.is_sandbox,
            phone: phone.to_string(),
            kind: "enrollment".into(),
            body: sms_body(e.language.as_deref(), &code, link.as_deref()),
            code: Some(code),
            verification_token: Some(token),
        },
    )
    .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Initiate

#[derive(Clone, Debug)]
pub struct Initiate {
    /// E.164, normalised.
    pub phone: String,
    pub program: Option<Uuid>,
    pub language: Option<String>,
    pub provider_customer_id: Option<String>,
    pub card_fingerprint: Option<String>,
    pub service_session_id: Option<Uuid>,
}

#[derive(Clone, Debug)]
pub struct Enrolled {
    pub identity: wallet_user::Model,
    pub wallet: wallet::Model,
    /// None for a customer who was already verified.
    pub enrollment: Option<enrollment::Model>,
    pub sms_sent: bool,
    pub created_identity: bool,
}

async fn provider_id_free<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    identity: Option<Uuid>,
    provider_customer_id: &str,
) -> Result<bool, ApiError> {
    Ok(
        store::enrollments::identity_by_provider_id(c, merchant, provider_customer_id)
            .await?
            .is_none_or(|other| Some(other.id) == identity),
    )
}

fn provider_taken() -> ApiError {
    ApiError::field(
        "/provider_customer_id",
        "already_linked",
        "is already linked to another customer of this merchant",
    )
}

/// POST /enroll/initiate. Creates the PENDING_PROOF identity (and its wallet in the
/// program) and texts the code and link. A phone already VERIFIED is a success with no
/// SMS; one with a window open and an SMS already sent gets that window back without a
/// second SMS (POST /enroll/resend sends again, within its limits).
pub async fn initiate<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    policy: &Policy,
    req: Initiate,
    now: DateTime<Utc>,
) -> Result<Enrolled, ApiError> {
    let merchant = caller.acting.merchant_id;
    if let Some(sid) = req.service_session_id {
        // The session comes first in the lock order, and must be this terminal's and open.
        super::checkout::hold(c, caller, sid, now).await?;
    }
    let program = wallets::program_for(c, merchant, req.program).await?;
    if let Some(pid) = &req.provider_customer_id {
        let existing = store::wallets::find_identity_by_phone(c, merchant, &req.phone).await?;
        if !provider_id_free(c, merchant, existing.map(|i| i.id), pid).await? {
            return Err(provider_taken());
        }
    }
    let (found, created_identity) =
        store::wallets::insert_identity_if_absent(c, merchant, &req.phone, PENDING_PROOF, now)
            .await?;
    let mut identity = store::wallets::lock_identity(c, merchant, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let wallet = wallets::wallet_in_program(c, &identity, &program, now).await?;
    if identity.state == VERIFIED {
        return Ok(Enrolled {
            identity,
            wallet,
            enrollment: None,
            sms_sent: false,
            created_identity: false,
        });
    }
    let mut events = Vec::new();
    let mut pending = store::enrollments::pending_of(c, identity.id).await?;
    if let Some(e) = pending.take_if(|e| e.expires_at <= now) {
        // Lapsed but not yet swept: lapse it now, then start afresh.
        lapse(c, &identity, e, now, &mut events).await?;
        identity.state = EXPIRED.into();
    }
    if identity.state == EXPIRED {
        store::enrollments::set_identity_state(c, identity.id, PENDING_PROOF, None, now).await?;
        identity.state = PENDING_PROOF.into();
    }
    let (mut e, fresh) = match pending {
        Some(e) => (e, false),
        None => (
            new_enrollment(&identity, program.id, Origin::Initiate, policy.window, now),
            true,
        ),
    };
    let sms_sent = e.sends == 0;
    let moved_session = req
        .service_session_id
        .is_some_and(|s| e.service_session_id != Some(s));
    e.service_session_id = req.service_session_id.or(e.service_session_id);
    if sms_sent {
        e.wallet_program_id = program.id;
        e.language = req.language.clone();
        e.provider_customer_id = req.provider_customer_id.clone();
        e.card_fingerprint_hash = req
            .card_fingerprint
            .as_deref()
            .map(|f| customers::card_fingerprint_hash(sealer, merchant, f));
        send_code(c, sealer, caller, policy, &mut e, &identity.phone, now).await?;
    }
    if fresh {
        store::enrollments::insert(c, e.clone()).await?;
    } else if sms_sent || moved_session {
        store::enrollments::update(c, e.clone()).await?;
    }
    if created_identity {
        events.push(enrolled_event(&identity, &wallet, Some(e.id), now));
    }
    store::outbox::append_all(c, events).await?;
    Ok(Enrolled {
        identity,
        wallet,
        enrollment: Some(e),
        sms_sent,
        created_identity,
    })
}

// ---------------------------------------------------------------------------------------
// Resend

/// Which enrollment a code (or a resend) is for: the phone, the enrollment id, the checkout
/// session that started the enrollment, or (a code alone, as the spec's verify body
/// allows) the terminal that sent the code. A bare 6-digit code is never matched across
/// customers at large.
#[derive(Clone, Debug)]
pub enum Target {
    Phone(String),
    Enrollment(Uuid),
    Session(Uuid),
    /// `context.terminal_id`: the newest pending enrollment whose code this terminal of
    /// this integration sent (two POS vendors of one merchant may both name a till
    /// "till-1"; a code keyed at one never counts against the other's enrollment).
    Terminal {
        integration: Uuid,
        terminal: String,
    },
}

async fn find_target<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    target: &Target,
) -> Result<Option<enrollment::Model>, ApiError> {
    Ok(match target {
        Target::Phone(p) => match store::wallets::find_identity_by_phone(c, merchant, p).await? {
            Some(i) => store::enrollments::latest_of(c, i.id).await?,
            None => None,
        },
        Target::Enrollment(id) => store::enrollments::find(c, merchant, *id).await?,
        Target::Session(s) => store::enrollments::pending_of_session(c, merchant, *s).await?,
        Target::Terminal {
            integration,
            terminal,
        } => store::enrollments::pending_of_terminal(c, merchant, *integration, terminal).await?,
    })
}

fn no_enrollment() -> ApiError {
    ApiError::not_found("Pending enrollment").with_message(
        "No pending enrollment for this customer; start one with POST /enroll/initiate.",
    )
}

fn limited(limit: u64, retry: i64, window: i64, message: &str) -> ApiError {
    let retry = retry.max(1) as u64;
    ApiError::rate_limited(
        RateLimitInfo {
            limit,
            remaining: 0,
            reset_secs: retry,
            window_secs: window.max(1) as u64,
        },
        retry,
    )
    .with_message(message.to_string())
}

#[derive(Clone, Debug)]
pub struct Resent {
    pub identity: wallet_user::Model,
    pub enrollment: enrollment::Model,
    pub sms_sent: bool,
}

/// POST /enroll/resend: a new code and link by SMS, at most `MAX_SENDS` per window and one
/// per `RESEND_COOLDOWN_SECS` (both RATE_LIMITED with Retry-After). A customer already
/// verified is a success without an SMS.
pub async fn resend<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    policy: &Policy,
    target: &Target,
    service_session_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<Resent, ApiError> {
    let merchant = caller.acting.merchant_id;
    if let Some(sid) = service_session_id {
        super::checkout::hold(c, caller, sid, now).await?;
    }
    let found = find_target(c, merchant, target)
        .await?
        .ok_or_else(no_enrollment)?;
    let identity = store::wallets::lock_identity(c, merchant, found.wallet_user_id)
        .await?
        .ok_or_else(no_enrollment)?;
    let mut e = store::enrollments::lock(c, found.id)
        .await?
        .ok_or_else(no_enrollment)?;
    if identity.state == VERIFIED {
        return Ok(Resent {
            identity,
            enrollment: e,
            sms_sent: false,
        });
    }
    if e.status != PENDING || e.expires_at <= now {
        return Err(no_enrollment());
    }
    if e.sends >= MAX_SENDS {
        return Err(limited(
            MAX_SENDS as u64,
            (e.expires_at - now).num_seconds(),
            (e.expires_at - e.created_at).num_seconds(),
            "This enrollment has had all its SMS; start again once it lapses.",
        ));
    }
    if let Some(last) = e.last_sent_at
        && last + Duration::seconds(RESEND_COOLDOWN_SECS) > now
    {
        return Err(limited(
            1,
            (last + Duration::seconds(RESEND_COOLDOWN_SECS) - now).num_seconds(),
            RESEND_COOLDOWN_SECS,
            "An SMS was sent moments ago; wait before sending another.",
        ));
    }
    send_code(c, sealer, caller, policy, &mut e, &identity.phone, now).await?;
    // A code sent into a checkout session can be keyed in that session alone.
    e.service_session_id = service_session_id.or(e.service_session_id);
    store::enrollments::update(c, e.clone()).await?;
    Ok(Resent {
        identity,
        enrollment: e,
        sms_sent: true,
    })
}

// ---------------------------------------------------------------------------------------
// Verify

/// The proof a verify presents.
#[derive(Clone, Debug)]
pub enum Proof {
    Token(String),
    Code { code: String, target: Target },
}

impl Proof {
    /// The proof as the calling integration presents it: a code keyed at a till names that
    /// integration's till.
    pub fn of_integration(self, id: Uuid) -> Proof {
        match self {
            Proof::Code {
                code,
                target: Target::Terminal { terminal, .. },
            } => Proof::Code {
                code,
                target: Target::Terminal {
                    integration: id,
                    terminal,
                },
            },
            other => other,
        }
    }
}

fn replayed(message: &str) -> ApiError {
    ApiError::new(ErrorCode::CredentialExpiredOrReplayed, message)
}

fn bad_token() -> ApiError {
    ApiError::field(
        "/verification_token",
        "invalid_token",
        "is not a verification token issued by this service for this merchant",
    )
}

/// Why an enrollment cannot be verified now, if it cannot.
fn closed(e: &enrollment::Model, now: DateTime<Utc>) -> Option<ApiError> {
    match e.status.as_str() {
        VERIFIED_STATUS => Some(replayed(
            "This enrollment was already verified; the token or code cannot be used again.",
        )),
        PENDING if e.expires_at > now => None,
        _ => Some(replayed(
            "The enrollment window lapsed; start again with POST /enroll/initiate.",
        )),
    }
}

/// Why a code cannot be checked now (no code sent, locked, expired), if it cannot.
fn code_unusable(e: &enrollment::Model, now: DateTime<Utc>) -> Option<ApiError> {
    if e.code_hash.is_none() {
        return Some(replayed(
            "No code was sent for this enrollment; send one with POST /enroll/resend.",
        ));
    }
    if e.code_failed_attempts >= MAX_WRONG_CODES {
        let wait = e.last_sent_at.map_or(1, |l| {
            (l + Duration::seconds(RESEND_COOLDOWN_SECS) - now).num_seconds()
        });
        return Some(limited(
            MAX_WRONG_CODES as u64,
            wait,
            CODE_TTL_SECS,
            "Too many wrong codes; send a new code with POST /enroll/resend.",
        ));
    }
    if e.code_expires_at.is_none_or(|t| t <= now) {
        return Some(replayed(
            "The code expired; send a new one with POST /enroll/resend.",
        ));
    }
    None
}

/// Checks a code before verification runs, in a transaction of its own holding the
/// enrollment's row lock, so a wrong code is counted and committed even though the request
/// fails, and concurrent guesses queue. Runs as its own task, so a caller that hangs up
/// cannot abort the count. Returns the enrollment the right code belongs to.
pub async fn check_code(
    db: &DatabaseConnection,
    sealer: &Sealer,
    merchant: Uuid,
    target: Target,
    code: String,
) -> Result<Uuid, ApiError> {
    let (db, sealer) = (db.clone(), sealer.clone());
    let task = tokio::spawn(async move {
        let now = Utc::now();
        let txn = store::begin(&db).await?;
        let found = find_target(&txn, merchant, &target)
            .await?
            .ok_or_else(no_enrollment)?;
        let mut e = store::enrollments::lock(&txn, found.id)
            .await?
            .ok_or_else(no_enrollment)?;
        if let Some(err) = closed(&e, now).or_else(|| code_unusable(&e, now)) {
            return Err(err);
        }
        if e.code_hash.as_deref().is_some_and(|h| {
            sealer.verify_mac("enrollment_code", format!("{}:{code}", e.id).as_bytes(), h)
        }) {
            return Ok(e.id);
        }
        e.code_failed_attempts += 1;
        e.updated_at = now;
        let remaining = (MAX_WRONG_CODES - e.code_failed_attempts).max(0);
        store::enrollments::update(&txn, e).await?;
        txn.commit().await?;
        Err(ApiError::new(
            ErrorCode::OtpInvalid,
            if remaining == 0 {
                "Wrong code. The code is now locked; send a new one with POST /enroll/resend."
            } else {
                "Wrong code."
            },
        )
        .with_details(json!({"reason": "wrong_code", "attempts_remaining": remaining})))
    });
    task.await.map_err(ApiError::internal)?
}

/// What proof (verify) or a claim released.
#[derive(Clone, Debug, Default)]
pub struct Released {
    pub grants: Vec<promo_grant::Model>,
    /// Grants that could not be released, with why: `expired`, `clawed_back`,
    /// `not_verified`.
    pub skipped: Vec<(promo_grant::Model, &'static str)>,
    /// Escrowed actual money returned to the wallets.
    pub escrow_returned_minor: i64,
    pub wallets: Vec<(wallet::Model, Balance)>,
}

impl Released {
    pub fn released_promo_minor(&self) -> i64 {
        self.grants.iter().map(|g| g.remaining_minor).sum()
    }
}

/// Releases every LOCKED, unexpired grant of a VERIFIED identity's wallets and returns any
/// escrowed money, under each wallet's lock, with their events. The identity must be
/// locked by the caller. Grants already released are left alone, so running it twice
/// releases nothing twice.
pub async fn release_all<C: ConnectionTrait>(
    c: &C,
    identity: &wallet_user::Model,
    cause: &str,
    cause_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Released, ApiError> {
    let mut out = Released::default();
    let mut events = Vec::new();
    for found in store::wallets::wallets_of_identity(c, identity.id).await? {
        let w = store::wallets::lock_wallet(c, identity.merchant_id, found.id)
            .await?
            .ok_or_else(|| ApiError::not_found("Wallet"))?;
        let escrowed = store::ledger::account_balance(c, Account::MerchantEscrow(w.id)).await?;
        if escrowed > 0 {
            store::ledger::post(
                c,
                &ledger::posting::escrow_release(w.merchant_id, w.id, &w.currency, escrowed),
                store::ledger::Reference {
                    kind: cause,
                    id: cause_id,
                    memo: Some("escrow returned on verification".into()),
                },
            )
            .await?;
            out.escrow_returned_minor += escrowed;
        }
        let mut release = Vec::new();
        for g in
            store::wallets::grants_in_states(c, w.id, &["LOCKED", "CLAWED_BACK", "EXPIRED"]).await?
        {
            match g.state.as_str() {
                "LOCKED" if g.expires_at > now && g.remaining_minor > 0 => release.push(g),
                "LOCKED" | "EXPIRED" => out.skipped.push((g, "expired")),
                _ => out.skipped.push((g, "clawed_back")),
            }
        }
        let ids: Vec<Uuid> = release.iter().map(|g| g.id).collect();
        store::wallets::release_grants(c, &ids, now).await?;
        for g in &release {
            events.push(grant_events::released_event(g, &w, identity, cause, now));
        }
        // The release returned exactly `escrowed` to actual money; nothing else moved it.
        let w = wallet::Model {
            actual_minor: w.actual_minor + escrowed,
            ..w
        };
        let balance = wallets::current_balance(c, &w).await?;
        if escrowed > 0 || !release.is_empty() {
            events.push(wallets::balance_changed(&w, &balance, cause, cause_id, now));
        }
        out.grants.extend(release.into_iter().map(|mut g| {
            g.state = "RELEASED".into();
            g
        }));
        out.wallets.push((w, balance));
    }
    store::outbox::append_all(c, events).await?;
    Ok(out)
}

#[derive(Clone, Debug)]
pub struct Verified {
    pub identity: wallet_user::Model,
    pub enrollment: enrollment::Model,
    pub released: Released,
    pub provider_customer_id_linked: bool,
}

/// POST /enroll/verify: PENDING_PROOF becomes VERIFIED; in the same transaction the LOCKED
/// grants release, escrowed money returns, the provider customer id and card fingerprint
/// given at initiate are linked, and `enrollment.verified` is written.
pub async fn verify<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    proof: &Proof,
    now: DateTime<Utc>,
) -> Result<Verified, ApiError> {
    let merchant = caller.acting.merchant_id;
    let found = match proof {
        Proof::Token(t) => {
            let id = parse_token(sealer, merchant, t).ok_or_else(bad_token)?;
            store::enrollments::find(c, merchant, id)
                .await?
                .ok_or_else(bad_token)?
        }
        Proof::Code { target, .. } => find_target(c, merchant, target)
            .await?
            .ok_or_else(no_enrollment)?,
    };
    let identity = store::wallets::lock_identity(c, merchant, found.wallet_user_id)
        .await?
        .ok_or_else(no_enrollment)?;
    let mut e = store::enrollments::lock(c, found.id)
        .await?
        .ok_or_else(no_enrollment)?;
    if let Some(err) = closed(&e, now) {
        return Err(err);
    }
    if let Proof::Code { code, .. } = proof {
        // `check_code` counted this code right a moment ago; the lock now held makes sure
        // it is still the current one.
        if let Some(err) = code_unusable(&e, now) {
            return Err(err);
        }
        let ok = e.code_hash.as_deref().is_some_and(|h| {
            sealer.verify_mac("enrollment_code", format!("{}:{code}", e.id).as_bytes(), h)
        });
        if !ok {
            return Err(ApiError::new(ErrorCode::OtpInvalid, "Wrong code.")
                .with_details(json!({"reason": "wrong_code"})));
        }
    }
    let mut linked = false;
    if let Some(pid) = &e.provider_customer_id {
        if !provider_id_free(c, merchant, Some(identity.id), pid).await? {
            return Err(ApiError::conflict(
                "The provider customer id given at enrollment was linked to another customer since; start the enrollment again without it or with another id.",
            ));
        }
        linked = identity.provider_customer_id.as_deref() != Some(pid.as_str());
    }
    let taken = |err: sea_orm::DbErr| {
        if store::is_unique_violation(&err) {
            ApiError::conflict(
                "The provider customer id or card given at enrollment was linked to another customer at the same moment; start the enrollment again without it.",
            )
        } else {
            err.into()
        }
    };
    store::enrollments::set_identity_state(
        c,
        identity.id,
        VERIFIED,
        e.provider_customer_id.clone(),
        now,
    )
    .await
    .map_err(taken)?;
    if let Some(hash) = &e.card_fingerprint_hash
        && store::enrollments::identity_by_link(c, merchant, "card_fingerprint", hash)
            .await?
            .is_none()
    {
        store::enrollments::insert_link(c, merchant, identity.id, "card_fingerprint", hash, now)
            .await
            .map_err(taken)?;
    }
    e.status = VERIFIED_STATUS.into();
    e.verified_at = Some(now);
    e.updated_at = now;
    store::enrollments::update(c, e.clone()).await?;
    let identity = store::wallets::find_identity(c, merchant, identity.id)
        .await?
        .ok_or_else(no_enrollment)?;
    let released = release_all(c, &identity, "enrollment", e.id, now).await?;
    store::outbox::append(
        c,
        event(
            "enrollment.verified",
            &identity,
            json!({
                "wallet_user_id": identity.id.to_string(),
                "enrollment_id": e.id.to_string(),
                "method": match proof { Proof::Token(_) => "link", Proof::Code { .. } => "code" },
                "released_grant_ids": released.grants.iter().map(|g| g.id.to_string()).collect::<Vec<_>>(),
                "released_promo_minor": released.released_promo_minor(),
                "escrow_returned_actual_minor": released.escrow_returned_minor,
                "currency": released.wallets.first().map(|(w, _)| w.currency.clone()),
                "provider_customer_id_linked": linked,
            }),
            now,
        ),
    )
    .await?;
    Ok(Verified {
        identity,
        enrollment: e,
        released,
        provider_customer_id_linked: linked,
    })
}

// ---------------------------------------------------------------------------------------
// Claims

/// Where a claim ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// At least one grant released.
    Completed,
    /// Verified, but nothing was claimable (already released, clawed back, expired).
    NothingToClaim,
    /// The identity has not proven its phone: nothing released; verify first.
    PendingVerification,
}

impl ClaimState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::Completed => "completed",
            ClaimState::NothingToClaim => "nothing_to_claim",
            ClaimState::PendingVerification => "pending_verification",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Claimed {
    pub claim_id: Uuid,
    pub state: ClaimState,
    pub identity: wallet_user::Model,
    pub released: Released,
}

/// POST /claims: releases the LOCKED grants of a VERIFIED identity, named by one or more
/// credentials that must agree. Nothing claimable, or an identity still pending proof, is
/// a success that releases nothing.
pub async fn claim<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    named: &[customers::IdentityCredential],
    now: DateTime<Utc>,
) -> Result<Claimed, ApiError> {
    let merchant = caller.acting.merchant_id;
    let found = customers::find_named(c, sealer, caller, named, now).await?;
    let identity = store::wallets::lock_identity(c, merchant, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Customer"))?;
    let claim_id = Uuid::now_v7();
    if identity.state != VERIFIED {
        let mut released = Released::default();
        for w in store::wallets::wallets_of_identity(c, identity.id).await? {
            for g in store::wallets::grants_in_states(c, w.id, &["LOCKED"]).await? {
                released.skipped.push((g, "not_verified"));
            }
            let balance = wallets::current_balance(c, &w).await?;
            released.wallets.push((w, balance));
        }
        return Ok(Claimed {
            claim_id,
            state: ClaimState::PendingVerification,
            identity,
            released,
        });
    }
    let released = release_all(c, &identity, "claim", claim_id, now).await?;
    let state = if released.grants.is_empty() {
        ClaimState::NothingToClaim
    } else {
        ClaimState::Completed
    };
    Ok(Claimed {
        claim_id,
        state,
        identity,
        released,
    })
}

// ---------------------------------------------------------------------------------------
// Expiry

/// The identity's window lapsed: it becomes EXPIRED, its actual money moves into the
/// merchant's escrow for each wallet, and `enrollment.expired` is written to `events`. The
/// caller holds the identity locked.
async fn lapse<C: ConnectionTrait>(
    c: &C,
    identity: &wallet_user::Model,
    mut e: enrollment::Model,
    now: DateTime<Utc>,
    events: &mut Vec<NewOutbox>,
) -> Result<(), ApiError> {
    e.status = EXPIRED_STATUS.into();
    e.expired_at = Some(now);
    e.updated_at = now;
    store::enrollments::update(c, e.clone()).await?;
    if identity.state != PENDING_PROOF {
        return Ok(());
    }
    store::enrollments::set_identity_state(c, identity.id, EXPIRED, None, now).await?;
    let mut escrowed = 0;
    let mut locked_promo = 0;
    let mut currency = None;
    for found in store::wallets::wallets_of_identity(c, identity.id).await? {
        let w = store::wallets::lock_wallet(c, identity.merchant_id, found.id)
            .await?
            .ok_or_else(|| ApiError::not_found("Wallet"))?;
        currency.get_or_insert(w.currency.clone());
        let held = w.actual_minor;
        if held > 0 {
            store::ledger::post(
                c,
                &ledger::posting::escrow_hold(w.merchant_id, w.id, &w.currency, held),
                store::ledger::Reference {
                    kind: "enrollment",
                    id: e.id,
                    memo: Some("pending-proof window lapsed".into()),
                },
            )
            .await?;
        }
        // The hold took all of the actual money; the grants did not move.
        let w = wallet::Model {
            actual_minor: 0,
            ..w
        };
        let balance = wallets::current_balance(c, &w).await?;
        locked_promo += balance.promo_locked_minor;
        if held > 0 {
            escrowed += held;
            events.push(wallets::balance_changed(
                &w,
                &balance,
                "enrollment_expired",
                e.id,
                now,
            ));
        }
    }
    events.push(event(
        "enrollment.expired",
        identity,
        json!({
            "wallet_user_id": identity.id.to_string(),
            "enrollment_id": e.id.to_string(),
            "escrowed_actual_minor": escrowed,
            "locked_promo_minor": locked_promo,
            "currency": currency,
        }),
        now,
    ));
    Ok(())
}

/// Lapses every pending window past its deadline, one transaction each. Safe on several
/// workers at once: each one takes the identity's lock and re-reads the enrollment, so a
/// window lapses once. Returns how many lapsed.
pub async fn expire_due(db: &DatabaseConnection, now: DateTime<Utc>) -> Result<usize, ApiError> {
    let mut lapsed = 0;
    loop {
        let due = store::enrollments::due(db, now, 100).await?;
        if due.is_empty() {
            return Ok(lapsed);
        }
        let batch = due.len();
        let before = lapsed;
        for found in due {
            let txn = store::begin(db).await?;
            let Some(identity) =
                store::wallets::lock_identity(&txn, found.merchant_id, found.wallet_user_id)
                    .await?
            else {
                continue;
            };
            let Some(e) = store::enrollments::lock(&txn, found.id).await? else {
                continue;
            };
            if e.status != PENDING || e.expires_at > now {
                continue;
            }
            let mut events = Vec::new();
            lapse(&txn, &identity, e, now, &mut events).await?;
            store::outbox::append_all(&txn, events).await?;
            txn.commit().await?;
            lapsed += 1;
        }
        if batch < 100 || lapsed == before {
            return Ok(lapsed);
        }
    }
}

/// Payments need the phone proven: PENDING_PROOF (and a lapsed window) is FORBIDDEN.
pub fn may_pay(identity: &wallet_user::Model) -> bool {
    identity.state == VERIFIED
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        Sealer::new(&[7u8; 32])
    }

    fn enrollment(merchant: Uuid) -> enrollment::Model {
        let identity = wallet_user::Model {
            id: Uuid::now_v7(),
            merchant_id: merchant,
            phone: "+4915100000000".into(),
            state: PENDING_PROOF.into(),
            provider_customer_id: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            verified_at: None,
        };
        new_enrollment(
            &identity,
            Uuid::now_v7(),
            Origin::Initiate,
            Duration::hours(1),
            Utc::now(),
        )
    }

    #[test]
    fn a_token_verifies_for_its_merchant_only() {
        let s = sealer();
        let m = Uuid::now_v7();
        let e = enrollment(m);
        let t = token(&s, &e);
        assert_eq!(parse_token(&s, m, &t), Some(e.id));
        assert_eq!(parse_token(&s, Uuid::now_v7(), &t), None);
    }

    #[test]
    fn a_tampered_token_is_rejected() {
        let s = sealer();
        let m = Uuid::now_v7();
        let t = token(&s, &enrollment(m));
        let other = token(&s, &enrollment(m));
        // Another enrollment's id with this signature, and a flipped signature character.
        let (_, sig) = t.rsplit_once('.').unwrap();
        let (other_id, _) = other.rsplit_once('.').unwrap();
        assert_eq!(parse_token(&s, m, &format!("{other_id}.{sig}")), None);
        let mut flipped = t.clone();
        let last = flipped.pop().unwrap();
        flipped.push(if last == '0' { '1' } else { '0' });
        assert_eq!(parse_token(&s, m, &flipped), None);
        assert_eq!(parse_token(&s, m, "ev1.garbage"), None);
        assert_eq!(parse_token(&s, m, ""), None);
    }

    #[test]
    fn the_sms_speaks_the_requested_language_and_falls_back_to_english() {
        assert!(sms_body(Some("de-DE"), "123456", None).starts_with("Ihr"));
        assert!(sms_body(Some("fr"), "123456", None).starts_with("Votre"));
        assert!(sms_body(Some("xx"), "123456", None).starts_with("Your"));
        assert!(
            sms_body(None, "123456", Some("https://x/v?token=t")).ends_with("https://x/v?token=t")
        );
    }

    #[test]
    fn codes_are_six_digits() {
        for _ in 0..100 {
            let c = new_code();
            assert_eq!(c.len(), 6);
            assert!(c.bytes().all(|b| b.is_ascii_digit()));
        }
    }
}
