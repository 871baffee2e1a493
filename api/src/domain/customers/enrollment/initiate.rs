//! Starting an enrollment and sending its code again: the customer's identity and wallet
//! are created (or found), a pending-proof window opens, and a code goes out by SMS.
use chrono::{DateTime, Duration, Utc};
use entities::{enrollment, enrollment::EnrollmentStatus, wallet, wallet_user};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::customers::enrollment::{
    MAX_SENDS, Policy, RESEND_COOLDOWN_SECS, Target, find_target, lapse, limited, no_enrollment,
    send_code,
};
use crate::domain::customers::proof_window::{Origin, enrolled_event, new_enrollment};

use crate::{
    domain::{
        credentials::scope::Acting,
        customers::wallets::{self, PENDING_PROOF, VERIFIED},
        customers::{self, EXPIRED},
    },
    error::ApiError,
    infra::crypto::Sealer,
    store,
};

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

/// Where a customer's enrollment stands after an initiate or a resend, as partners read it.
#[derive(Clone, Debug)]
pub struct Standing {
    pub state: wallet_user::WalletUserState,
    pub wallet_user_id: Uuid,
    /// None after a resend, which names no wallet.
    pub wallet_id: Option<Uuid>,
    pub wallet_program_id: Option<Uuid>,
    /// None for a customer who was already verified.
    pub enrollment_id: Option<Uuid>,
    pub phone_masked: String,
    /// While proof is pending: SMS left in this window, the one just sent excluded.
    pub sends_remaining: Option<i64>,
    /// While proof is pending: when the window for proof lapses.
    pub expires_at: Option<DateTime<Utc>>,
    /// While proof is pending: when the code in the latest SMS stops working.
    pub code_expires_at: Option<DateTime<Utc>>,
}

fn standing(
    identity: &wallet_user::Model,
    wallet: Option<&wallet::Model>,
    e: Option<&enrollment::Model>,
) -> Standing {
    let pending = e.filter(|_| identity.state != crate::domain::customers::wallets::VERIFIED);
    Standing {
        state: identity.state,
        wallet_user_id: identity.id,
        wallet_id: wallet.map(|w| w.id),
        wallet_program_id: wallet
            .map(|w| w.wallet_program_id)
            .or_else(|| e.map(|e| e.wallet_program_id)),
        enrollment_id: e.map(|e| e.id),
        phone_masked: crate::domain::payments::masked(&identity.phone),
        sends_remaining: pending.map(|e| i64::from(super::MAX_SENDS - e.sends)),
        expires_at: pending.map(|e| e.expires_at),
        code_expires_at: pending.and_then(|e| e.code_expires_at),
    }
}

impl Enrolled {
    pub fn standing(&self) -> Standing {
        standing(&self.identity, Some(&self.wallet), self.enrollment.as_ref())
    }
}

impl Resent {
    pub fn standing(&self) -> Standing {
        standing(&self.identity, None, Some(&self.enrollment))
    }
}

pub(super) async fn provider_id_free<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    identity: Option<Uuid>,
    provider_customer_id: &str,
) -> Result<bool, ApiError> {
    Ok(
        store::customers::enrollments::identity_by_provider_id(c, merchant, provider_customer_id)
            .await?
            .is_none_or(|other| Some(other.id) == identity),
    )
}

pub(super) fn provider_taken() -> ApiError {
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
    acting: &Acting,
    policy: &Policy,
    req: Initiate,
    now: DateTime<Utc>,
) -> Result<Enrolled, ApiError> {
    let merchant = acting.merchant_id;
    if let Some(sid) = req.service_session_id {
        // The session comes first in the lock order, and must be this terminal's and open.
        crate::domain::payments::checkout::hold(c, acting, sid, now).await?;
    }
    let program = wallets::program_for(c, merchant, req.program).await?;
    if let Some(pid) = &req.provider_customer_id {
        let existing =
            store::customers::wallets::find_identity_by_phone(c, merchant, &req.phone).await?;
        if !provider_id_free(c, merchant, existing.map(|i| i.id), pid).await? {
            return Err(provider_taken());
        }
    }
    let (found, created_identity) = store::customers::wallets::insert_identity_if_absent(
        c,
        merchant,
        &req.phone,
        PENDING_PROOF,
        now,
    )
    .await?;
    let mut identity = store::customers::wallets::lock_identity(c, merchant, found.id)
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
    let mut pending = store::customers::enrollments::pending_of(c, identity.id).await?;
    if let Some(e) = pending.take_if(|e| e.expires_at <= now) {
        // Lapsed but not yet swept: lapse it now, then start afresh.
        lapse(c, &identity, e, now, &mut events).await?;
        identity.state = EXPIRED;
    }
    if identity.state == EXPIRED {
        store::customers::enrollments::set_identity_state(c, identity.id, PENDING_PROOF, None, now)
            .await?;
        identity.state = PENDING_PROOF;
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
        send_code(c, sealer, acting, policy, &mut e, &identity.phone, now).await?;
    }
    if fresh {
        store::customers::enrollments::insert(c, e.clone()).await?;
    } else if sms_sent || moved_session {
        store::customers::enrollments::update(c, e.clone()).await?;
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
    acting: &Acting,
    policy: &Policy,
    target: &Target,
    service_session_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<Resent, ApiError> {
    let merchant = acting.merchant_id;
    if let Some(sid) = service_session_id {
        crate::domain::payments::checkout::hold(c, acting, sid, now).await?;
    }
    let found = find_target(c, merchant, target)
        .await?
        .ok_or_else(no_enrollment)?;
    let identity = store::customers::wallets::lock_identity(c, merchant, found.wallet_user_id)
        .await?
        .ok_or_else(no_enrollment)?;
    let mut e = store::customers::enrollments::lock(c, found.id)
        .await?
        .ok_or_else(no_enrollment)?;
    if identity.state == VERIFIED {
        return Ok(Resent {
            identity,
            enrollment: e,
            sms_sent: false,
        });
    }
    if e.status != EnrollmentStatus::Pending || e.expires_at <= now {
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
    send_code(c, sealer, acting, policy, &mut e, &identity.phone, now).await?;
    // A code sent into a checkout session can be keyed in that session alone.
    e.service_session_id = service_session_id.or(e.service_session_id);
    store::customers::enrollments::update(c, e.clone()).await?;
    Ok(Resent {
        identity,
        enrollment: e,
        sms_sent: true,
    })
}
