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
mod claim;
mod initiate;
mod lapse;
mod verify;

pub use claim::*;
pub use initiate::*;
pub use lapse::*;
pub use verify::*;

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Duration, Utc};
use entities::{enrollment, wallet_user};
use rand::Rng;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::{
    credentials::scope::Acting,
    customers::wallets::VERIFIED,
    outbox::job_requests::{self, SmsRequest},
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

pub use crate::domain::customers::proof_window::{
    Origin, credit_held_event, enrolled_event, open_window,
};

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
    acting: &Acting,
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
    e.integration_id = Some(acting.integration_id);
    e.is_sandbox = acting.is_sandbox;
    e.terminal_id = acting.terminal_id.clone();
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
            integration_id: acting.integration_id,
            merchant_id: Some(e.merchant_id),
            is_sandbox: acting.is_sandbox,
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
        Target::Phone(p) => {
            match store::customers::wallets::find_identity_by_phone(c, merchant, p).await? {
                Some(i) => store::customers::enrollments::latest_of(c, i.id).await?,
                None => None,
            }
        }
        Target::Enrollment(id) => store::customers::enrollments::find(c, merchant, *id).await?,
        Target::Session(s) => {
            store::customers::enrollments::pending_of_session(c, merchant, *s).await?
        }
        Target::Terminal {
            integration,
            terminal,
        } => {
            store::customers::enrollments::pending_of_terminal(c, merchant, *integration, terminal)
                .await?
        }
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

/// Payments need the phone proven: PENDING_PROOF (and a lapsed window) is FORBIDDEN.
pub fn may_pay(identity: &wallet_user::Model) -> bool {
    identity.state == VERIFIED
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{
        customers::proof_window::new_enrollment, customers::wallets::PENDING_PROOF,
    };

    fn sealer() -> Sealer {
        Sealer::new(&[7u8; 32])
    }

    fn enrollment(merchant: Uuid) -> enrollment::Model {
        let identity = wallet_user::Model {
            id: Uuid::now_v7(),
            merchant_id: merchant,
            phone: "+4915100000000".into(),
            state: PENDING_PROOF,
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
