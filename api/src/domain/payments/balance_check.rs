//! The redeem balance check (spec "Identity": a read-shaped POST): what the wallet a payment
//! credential belongs to could pay now for a given amount, and how the debit would split,
//! without consuming, locking or counting anything. The till asks before it takes the
//! payment; the payment itself decides (the balance may move in between).
//!
//! The credential is checked as the payment would check it, so its errors are the ones
//! the payment would give (a used QR nonce is CREDENTIAL_EXPIRED_OR_REPLAYED, an expired
//! OTP session OTP_EXPIRED), except that an OTP's code is never verified here: a check
//! that verified it without counting a wrong one would be a way round the three-attempt
//! lock, and counting would let a balance check lock a customer's session. An unknown
//! short code counts toward the integration's failed short codes like a payment's.
use chrono::{DateTime, Utc};
use entities::{wallet, wallet_user};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::{
    credentials::scope::Acting,
    customers::enrollment,
    customers::wallets::{self, Balance},
    ledger,
    payments::{self, Credential},
};
use crate::{error::ApiError, infra::crypto::Sealer, store};

#[derive(Clone, Debug)]
pub struct Check {
    pub credential: Credential,
    pub amount_minor: i64,
    pub currency: String,
    pub wallet_program_id: Option<Uuid>,
}

/// Why a check answers that the payment would not go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Released promotional credit plus actual money is less than the amount.
    InsufficientFunds,
    /// The customer has not proved the phone yet (the payment is FORBIDDEN).
    PendingProof,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::InsufficientFunds => "insufficient_funds",
            Refusal::PendingProof => "pending_proof",
        }
    }
}

pub struct Checked {
    pub wallet: wallet::Model,
    pub owner: wallet_user::Model,
    /// None: the payment would go through (as of now).
    pub refusal: Option<Refusal>,
    /// Released promotional credit plus actual money.
    pub spendable_minor: i64,
    pub would_debit_promo_minor: i64,
    pub would_debit_actual_minor: i64,
    pub shortfall_minor: i64,
    pub balance: Balance,
    /// When the presented credential stops being usable.
    pub credential_expires_at: DateTime<Utc>,
}

/// The credential's wallet and when the credential expires, or the error its payment would
/// get. Nothing is written.
async fn resolve<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    merchant: Uuid,
    check: &Check,
    now: DateTime<Utc>,
) -> Result<(Uuid, DateTime<Utc>), ApiError> {
    match &check.credential {
        Credential::Otp { otp_session_id, .. } => {
            let s = store::payments::find_otp(c, merchant, *otp_session_id)
                .await?
                .ok_or_else(|| payments::otp_invalid("unknown_session", "Unknown OTP session."))?;
            payments::check_session_for(&s, check.amount_minor, &check.currency, None, now)?;
            Ok((s.wallet_id, s.expires_at))
        }
        Credential::Qr { qr_payload } => {
            let n = store::payments::find_live_qr_by_hash(
                c,
                merchant,
                &crate::domain::credentials::credential_codes::nonce_hash(qr_payload),
                now,
            )
            .await?
            .ok_or_else(|| {
                payments::replayed("Unknown, expired or already used QR code; mint a new one.")
            })?;
            Ok((n.wallet_id, n.expires_at))
        }
        Credential::ShortCode { short_code } => {
            let n = store::payments::find_live_qr_by_short_code(
                c,
                merchant,
                &crate::domain::credentials::credential_codes::short_code_hash(
                    sealer, merchant, short_code,
                ),
                now,
            )
            .await?
            .ok_or_else(|| {
                payments::replayed("Unknown, expired or already used short code; mint a new one.")
            })?;
            Ok((n.wallet_id, n.expires_at))
        }
    }
}

pub async fn check<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    check: Check,
    now: DateTime<Utc>,
) -> Result<Checked, ApiError> {
    let merchant = acting.merchant_id;
    let (wallet_id, credential_expires_at) = resolve(c, sealer, merchant, &check, now).await?;
    let (w, owner) = store::customers::wallets::find_wallet_with_owner(c, merchant, wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    payments::credential_wallet_fits(c, &w, check.wallet_program_id, &check.currency).await?;
    let grants = store::customers::wallets::live_grants(c, w.id).await?;
    let balance = wallets::balance(&w, &grants, now);
    let views: Vec<_> = grants.iter().map(wallets::grant_view).collect();
    let spendable_minor = crate::domain::ledger::money::saturating_sum([
        balance.actual_minor,
        balance.promo_available_minor,
    ]);
    let (mut refusal, promo, actual, shortfall) =
        match ledger::plan_debit(&views, w.actual_minor, check.amount_minor, now) {
            Ok(plan) => (None, plan.promo_minor(), plan.from_actual, 0),
            Err(s) => (Some(Refusal::InsufficientFunds), 0, 0, s.shortfall_minor),
        };
    if !enrollment::may_pay(&owner) {
        refusal = Some(Refusal::PendingProof);
    }
    Ok(Checked {
        wallet: w,
        owner,
        refusal,
        spendable_minor,
        would_debit_promo_minor: promo,
        would_debit_actual_minor: actual,
        shortfall_minor: shortfall,
        balance,
        credential_expires_at,
    })
}
