//! QR payments: a single-use nonce bound to the customer's wallet, optionally with a short
//! code, and when a presented nonce may still pay.
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Duration, Utc};
use entities::{qr_nonce, wallet};
use rand::Rng;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::payments::{Customer, QR_PREFIX, QR_TTL_SECS, SHORT_CODE_ALPHABET, identity};

use crate::{
    domain::{
        credentials::credential_codes::{nonce_hash, short_code_hash},
        credentials::scope::Acting,
        customers::wallets,
        payments::checkout,
    },
    error::ApiError,
    infra::crypto::Sealer,
    store,
};

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
    acting: &Acting,
    req: QrMint,
    now: DateTime<Utc>,
) -> Result<QrMinted, ApiError> {
    let merchant = acting.merchant_id;
    // The session is the caller's, open and (unless the body names the customer)
    // identified; its program is the default choice.
    let session = match req.service_session_id {
        Some(id) => Some(checkout::hold(c, acting, id, now).await?),
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
    let who = store::customers::wallets::lock_identity(c, merchant, found.id)
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
        checkout_session_id: session.as_ref().map(|s| s.id),
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
