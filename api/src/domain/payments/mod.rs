//! Wallet payments: the credentials that authorize a debit (OTP session, QR nonce, short
//! code), the debit itself, and its reversal by void or refund. Every function here runs
//! inside the caller's idempotent transaction; nothing in it commits on its own.
//!
//! Lock order, the same everywhere so two requests never wait on each other in a circle:
//! the credential (OTP session or QR nonce) or the payment first, then the wallet.
pub mod admission;
pub mod balance_check;
mod basket;
pub mod checkout;
mod otp;
mod pay;
mod qr;
mod read;
mod reverse;

pub use basket::*;
pub use otp::*;
pub use pay::*;
pub use qr::*;
pub use read::{Payment, PromoPart, Refund, Reversibility, WithRefunds, reversibility};
pub use reverse::*;

use entities::{payment, wallet_user};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::credentials::{Principal, scope};
use crate::{
    error::{ApiError, ErrorCode},
    store,
};

pub const OTP_TTL_SECS: i64 = 300;
pub const OTP_MAX_SENDS: usize = 3;
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
        Customer::Phone(p) => {
            store::customers::wallets::find_identity_by_phone(c, merchant_id, p).await?
        }
        Customer::WalletUser(id) => {
            store::customers::wallets::find_identity(c, merchant_id, *id).await?
        }
    }
    .ok_or_else(|| ApiError::not_found("Wallet"))
}

fn pending_proof() -> ApiError {
    ApiError::forbidden(
        "The customer has not completed phone proof; the wallet cannot pay until enrollment is verified.",
    )
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

/// `details.reason` of a wrong code (counted by `verify_otp`).
pub const WRONG_OTP: &str = "wrong_code";

pub(crate) fn otp_invalid(reason: &str, message: &str) -> ApiError {
    ApiError::new(ErrorCode::OtpInvalid, message).with_details(json!({ "reason": reason }))
}

pub(crate) fn replayed(message: &str) -> ApiError {
    ApiError::new(ErrorCode::CredentialExpiredOrReplayed, message)
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
) -> Result<Payment, ApiError> {
    let not_found = || ApiError::not_found("Payment");
    let p = store::payments::find(c, id).await?.ok_or_else(not_found)?;
    if visible(c, principal, &p).await? {
        Ok(p.into())
    } else {
        Err(not_found())
    }
}

/// A payment the caller may see with its refunds, or NOT_FOUND.
pub async fn show<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    id: Uuid,
) -> Result<WithRefunds, ApiError> {
    let payment = find_visible(c, principal, id).await?;
    let refunds = refunds_of(c, payment.id).await?;
    Ok(WithRefunds { payment, refunds })
}

/// A payment's refunds and its void, oldest first.
pub async fn refunds_of<C: ConnectionTrait>(
    c: &C,
    payment_id: Uuid,
) -> Result<Vec<Refund>, ApiError> {
    let rows = store::payments::refunds_of(c, payment_id).await?;
    Ok(rows.into_iter().map(Refund::from).collect())
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, Utc};
    use entities::qr_nonce;
    use uuid::Uuid;

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
            checkout_session_id: None,
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
