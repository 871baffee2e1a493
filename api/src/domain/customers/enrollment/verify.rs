//! Proving the phone: a code or the link's token closes the enrollment, the customer is
//! verified, and credit held for the unverified customer is released to the wallet.
use crate::store::Db;
use chrono::{DateTime, Duration, Utc};
use entities::{
    enrollment, enrollment::EnrollmentStatus, promo_grant::PromoGrantState, wallet, wallet_user,
};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::customers::enrollment::{
    CODE_TTL_SECS, MAX_WRONG_CODES, RESEND_COOLDOWN_SECS, Target, bad_token, find_target, limited,
    no_enrollment, parse_token, provider_id_free, replayed,
};
use crate::domain::customers::proof_window::event;
use crate::domain::incentives::grants::Grant;

use crate::{
    domain::{
        credentials::scope::Acting,
        customers::wallets::{self, Balance, VERIFIED},
        incentives::grant_events,
        ledger::{self, Account},
    },
    error::{ApiError, ErrorCode},
    infra::crypto::Sealer,
    store,
};

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

/// Why an enrollment cannot be verified now, if it cannot.
pub(super) fn closed(e: &enrollment::Model, now: DateTime<Utc>) -> Option<ApiError> {
    match e.status {
        EnrollmentStatus::Verified => Some(replayed(
            "This enrollment was already verified; the token or code cannot be used again.",
        )),
        EnrollmentStatus::Pending if e.expires_at > now => None,
        _ => Some(replayed(
            "The enrollment window lapsed; start again with POST /enroll/initiate.",
        )),
    }
}

/// Why a code cannot be checked now (no code sent, locked, expired), if it cannot.
pub(super) fn code_unusable(e: &enrollment::Model, now: DateTime<Utc>) -> Option<ApiError> {
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
    db: &Db,
    sealer: &Sealer,
    merchant: Uuid,
    target: Target,
    code: String,
    clock: crate::domain::sandbox::clock::Clock,
) -> Result<Uuid, ApiError> {
    let (db, sealer) = (db.clone(), sealer.clone());
    let task = tokio::spawn(async move {
        let now = clock.now();
        let txn = store::begin(&db).await?;
        let found = find_target(&txn, merchant, &target)
            .await?
            .ok_or_else(no_enrollment)?;
        let mut e = store::customers::enrollments::lock(&txn, found.id)
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
        store::customers::enrollments::update(&txn, e).await?;
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
    pub grants: Vec<Grant>,
    /// Grants that could not be released, with why: `expired`, `clawed_back`,
    /// `not_verified`.
    pub skipped: Vec<(Grant, &'static str)>,
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
    for found in store::customers::wallets::wallets_of_identity(c, identity.id).await? {
        let w = store::customers::wallets::lock_wallet(c, identity.merchant_id, found.id)
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
                    at: now,
                },
            )
            .await?;
            out.escrow_returned_minor += escrowed;
        }
        let mut release = Vec::new();
        let ended = [
            PromoGrantState::Locked,
            PromoGrantState::ClawedBack,
            PromoGrantState::Expired,
        ];
        for g in store::customers::wallets::grants_in_states(c, w.id, &ended).await? {
            match g.state {
                PromoGrantState::Locked if g.expires_at > now && g.remaining_minor > 0 => {
                    release.push(g)
                }
                PromoGrantState::Locked | PromoGrantState::Expired => {
                    out.skipped.push((g.into(), "expired"))
                }
                _ => out.skipped.push((g.into(), "clawed_back")),
            }
        }
        let ids: Vec<Uuid> = release.iter().map(|g| g.id).collect();
        for g in &release {
            // The credit changes class (locked to released); the grant keeps all of it.
            store::ledger::post(
                c,
                &ledger::posting::grant_release(
                    w.merchant_id,
                    w.id,
                    g.id,
                    &w.currency,
                    g.remaining_minor,
                ),
                store::ledger::Reference {
                    kind: cause,
                    id: cause_id,
                    memo: Some("grant released on verification".into()),
                    at: now,
                },
            )
            .await?;
        }
        store::customers::wallets::release_grants(c, &ids, now).await?;
        for g in &release {
            events.push(grant_events::released_event(g, &w, identity, cause, now));
        }
        // The release returned exactly `escrowed` to actual money; nothing else moved it.
        let w = wallet::Model {
            actual_minor: w.actual_minor + escrowed,
            ..w
        };
        let balance = wallets::current_balance(c, &w, now).await?;
        if escrowed > 0 || !release.is_empty() {
            events.push(wallets::balance_changed(&w, &balance, cause, cause_id, now));
        }
        out.grants.extend(release.into_iter().map(|mut g| {
            g.state = PromoGrantState::Released;
            Grant::from(g)
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
    acting: &Acting,
    proof: &Proof,
    now: DateTime<Utc>,
) -> Result<Verified, ApiError> {
    let merchant = acting.merchant_id;
    let found = match proof {
        Proof::Token(t) => {
            let id = parse_token(sealer, merchant, t).ok_or_else(bad_token)?;
            store::customers::enrollments::find(c, merchant, id)
                .await?
                .ok_or_else(bad_token)?
        }
        Proof::Code { target, .. } => find_target(c, merchant, target)
            .await?
            .ok_or_else(no_enrollment)?,
    };
    let identity = store::customers::wallets::lock_identity(c, merchant, found.wallet_user_id)
        .await?
        .ok_or_else(no_enrollment)?;
    let mut e = store::customers::enrollments::lock(c, found.id)
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
    store::customers::enrollments::set_identity_state(
        c,
        identity.id,
        VERIFIED,
        e.provider_customer_id.clone(),
        now,
    )
    .await
    .map_err(taken)?;
    if let Some(hash) = &e.card_fingerprint_hash
        && store::customers::enrollments::identity_by_link(c, merchant, "card_fingerprint", hash)
            .await?
            .is_none()
    {
        store::customers::enrollments::insert_link(
            c,
            merchant,
            identity.id,
            "card_fingerprint",
            hash,
            now,
        )
        .await
        .map_err(taken)?;
    }
    e.status = EnrollmentStatus::Verified;
    e.verified_at = Some(now);
    e.updated_at = now;
    store::customers::enrollments::update(c, e.clone()).await?;
    let identity = store::customers::wallets::find_identity(c, merchant, identity.id)
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
