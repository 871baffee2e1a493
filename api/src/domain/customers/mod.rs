//! Customers at the till: the identity credentials that name a customer, resolving one to
//! a wallet identity (read-only: nothing here moves money or changes state), the
//! CustomerContext a POS gets back, and the cashier panel's lookup.
pub mod enrollment;
pub mod identity;
pub mod proof_window;
pub mod wallets;
use chrono::{DateTime, Utc};
use entities::{wallet, wallet_user, wallet_user::WalletUserState};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::{
    credentials::scope::Acting,
    customers::wallets::{Balance, PENDING_PROOF, VERIFIED},
    outbox::events::{NewOutbox, OutboxKind},
};
use crate::{error::ApiError, infra::crypto::Sealer, store};

pub use crate::domain::customers::identity::IDENTITY_CREDENTIAL_TYPES;

/// After a pending-proof window lapsed without proof.
pub const EXPIRED: WalletUserState = WalletUserState::Expired;

/// How a request names a customer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityCredential {
    /// E.164, normalised.
    Phone(String),
    /// The card network's or acquirer's fingerprint of a payment card, linked at enrollment.
    CardFingerprint(String),
    /// The 5-character code of a live QR mint.
    ShortCode(String),
    /// The POS provider's own customer id, linked at enrollment.
    ProviderCustomerId(String),
    /// The payload of a live QR mint (identification does not consume it).
    Qr(String),
    /// A wallet identity id from an earlier identification.
    WalletUser(Uuid),
}

impl IdentityCredential {
    pub fn type_name(&self) -> &'static str {
        match self {
            IdentityCredential::Phone(_) => "phone",
            IdentityCredential::CardFingerprint(_) => "card_fingerprint",
            IdentityCredential::ShortCode(_) => "short_code",
            IdentityCredential::ProviderCustomerId(_) => "provider_customer_id",
            IdentityCredential::Qr(_) => "qr",
            IdentityCredential::WalletUser(_) => "wallet_user_id",
        }
    }
}

pub fn card_fingerprint_hash(sealer: &Sealer, merchant: Uuid, value: &str) -> String {
    sealer.mac("card_fingerprint", format!("{merchant}:{value}").as_bytes())
}

/// The identity credential types the integration has enabled.
pub async fn supported_types<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
) -> Result<Vec<String>, ApiError> {
    let integration = store::tenancy::find_integration(c, integration_id)
        .await?
        .ok_or_else(ApiError::invalid_api_key)?;
    serde_json::from_value(integration.identify_credential_types).map_err(ApiError::internal)
}

/// CREDENTIAL_TYPE_UNSUPPORTED (with the enabled list) unless the integration enables the
/// credential's type. A wallet identity id is always accepted: the service issued it.
pub async fn require_supported<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    credential: &IdentityCredential,
) -> Result<(), ApiError> {
    if matches!(credential, IdentityCredential::WalletUser(_)) {
        return Ok(());
    }
    let supported = supported_types(c, integration_id).await?;
    if supported.iter().any(|t| t == credential.type_name()) {
        Ok(())
    } else {
        Err(ApiError::credential_type_unsupported(&supported))
    }
}

/// The identity a credential names at this merchant, and the wallet when the credential is
/// bound to one (a QR nonce or short code). Another tenant's customer is simply absent.
pub async fn find_identity<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    merchant: Uuid,
    credential: &IdentityCredential,
    now: DateTime<Utc>,
) -> Result<Option<(wallet_user::Model, Option<Uuid>)>, ApiError> {
    let via_nonce = |n: Option<entities::qr_nonce::Model>| n.map(|n| n.wallet_id);
    let (identity, wallet) = match credential {
        IdentityCredential::Phone(p) => (
            store::customers::wallets::find_identity_by_phone(c, merchant, p).await?,
            None,
        ),
        IdentityCredential::WalletUser(id) => (
            store::customers::wallets::find_identity(c, merchant, *id).await?,
            None,
        ),
        IdentityCredential::ProviderCustomerId(p) => (
            store::customers::enrollments::identity_by_provider_id(c, merchant, p).await?,
            None,
        ),
        IdentityCredential::CardFingerprint(f) => (
            store::customers::enrollments::identity_by_link(
                c,
                merchant,
                "card_fingerprint",
                &card_fingerprint_hash(sealer, merchant, f),
            )
            .await?,
            None,
        ),
        IdentityCredential::Qr(payload) => {
            let hash = crate::domain::credentials::credential_codes::nonce_hash(payload);
            let wallet =
                via_nonce(store::payments::find_live_qr_by_hash(c, merchant, &hash, now).await?);
            (identity_of_wallet(c, merchant, wallet).await?, wallet)
        }
        IdentityCredential::ShortCode(code) => {
            let hash = crate::domain::credentials::credential_codes::short_code_hash(
                sealer, merchant, code,
            );
            let wallet = via_nonce(
                store::payments::find_live_qr_by_short_code(c, merchant, &hash, now).await?,
            );
            (identity_of_wallet(c, merchant, wallet).await?, wallet)
        }
    };
    Ok(identity.map(|i| (i, wallet)))
}

async fn identity_of_wallet<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    wallet: Option<Uuid>,
) -> Result<Option<wallet_user::Model>, ApiError> {
    let Some(w) = wallet else { return Ok(None) };
    let Some(w) = store::customers::wallets::find_wallet(c, merchant, w).await? else {
        return Ok(None);
    };
    Ok(store::customers::wallets::find_identity(c, merchant, w.wallet_user_id).await?)
}

/// `resolution_state` of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolutionState {
    Registered,
    PendingProof,
    NotFound,
}

impl ResolutionState {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolutionState::Registered => "registered",
            ResolutionState::PendingProof => "pending_proof",
            ResolutionState::NotFound => "not_found",
        }
    }

    /// The value a checkout session keeps of it.
    pub fn stored(self) -> entities::checkout_session::SessionResolution {
        use entities::checkout_session::SessionResolution;
        match self {
            ResolutionState::Registered => SessionResolution::Registered,
            ResolutionState::PendingProof => SessionResolution::PendingProof,
            ResolutionState::NotFound => SessionResolution::NotFound,
        }
    }

    pub fn of(identity: &wallet_user::Model) -> ResolutionState {
        match identity.state {
            VERIFIED => ResolutionState::Registered,
            PENDING_PROOF => ResolutionState::PendingProof,
            // A lapsed window: the customer must enroll again before the wallet is usable.
            _ => ResolutionState::NotFound,
        }
    }
}

/// What identification found.
#[derive(Clone, Debug)]
pub struct Resolution {
    pub state: ResolutionState,
    pub identity: Option<wallet_user::Model>,
    pub wallet: Option<wallet::Model>,
    pub balance: Option<Balance>,
    pub badge: Option<String>,
    /// Correlates this identification with the calls that follow it.
    pub trace_id: Uuid,
}

impl Resolution {
    fn not_found() -> Resolution {
        Resolution {
            state: ResolutionState::NotFound,
            identity: None,
            wallet: None,
            balance: None,
            badge: None,
            trace_id: Uuid::now_v7(),
        }
    }
}

/// The customer's standing, shown on the cashier's screen: `PENDING_PROOF` until the phone
/// is proven, `NEW` for a verified customer who has not paid yet, then `MEMBER`.
pub fn badge(identity: &wallet_user::Model, has_paid: bool) -> &'static str {
    match (identity.state, has_paid) {
        (PENDING_PROOF, _) => "PENDING_PROOF",
        (VERIFIED, false) => "NEW",
        (VERIFIED, true) => "MEMBER",
        _ => "EXPIRED",
    }
}

/// The one customer every credential in `named` names (they must agree; the first is
/// reported as `/customer` when they do not), or NOT_FOUND.
pub async fn find_named<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    named: &[IdentityCredential],
    now: DateTime<Utc>,
) -> Result<wallet_user::Model, ApiError> {
    let mut found: Option<wallet_user::Model> = None;
    for customer in named {
        require_supported(c, acting.integration_id, customer).await?;
        let (i, _) = find_identity(c, sealer, acting.merchant_id, customer, now)
            .await?
            .ok_or_else(|| ApiError::not_found("Customer"))?;
        if found.as_ref().is_some_and(|f| f.id != i.id) {
            return Err(ApiError::field(
                "/customer",
                "customer_mismatch",
                "names another customer than wallet_user_id",
            ));
        }
        found = Some(i);
    }
    found.ok_or_else(|| ApiError::not_found("Customer"))
}

/// Resolves a credential to the customer's wallet in one program (read-only). A customer
/// with wallets in several programs and no `program` given is WALLET_PROGRAM_AMBIGUOUS.
pub async fn resolve<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    merchant: Uuid,
    credential: &IdentityCredential,
    program: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<Resolution, ApiError> {
    let Some((identity, bound_wallet)) =
        find_identity(c, sealer, merchant, credential, now).await?
    else {
        return Ok(Resolution::not_found());
    };
    let state = ResolutionState::of(&identity);
    if state == ResolutionState::NotFound {
        // A lapsed enrollment: not found for the till, but the identity is kept for the
        // cashier panel.
        return Ok(Resolution {
            identity: Some(identity),
            ..Resolution::not_found()
        });
    }
    let wallet = match bound_wallet {
        Some(id) => {
            let w = store::customers::wallets::find_wallet(c, merchant, id)
                .await?
                .ok_or_else(|| ApiError::not_found("Wallet"))?;
            if program.is_some_and(|p| p != w.wallet_program_id) {
                return Ok(Resolution::not_found());
            }
            w
        }
        None => match wallets::choose_wallet(c, &identity, None, program).await {
            Ok(w) => w,
            Err(e) if e.code() == crate::error::ErrorCode::NotFound => {
                return Ok(Resolution::not_found());
            }
            Err(e) => return Err(e),
        },
    };
    let balance = wallets::current_balance(c, &wallet, now).await?;
    let has_paid = !store::payments::recent_of_wallet(c, wallet.id, 1)
        .await?
        .is_empty();
    Ok(Resolution {
        state,
        badge: Some(badge(&identity, has_paid).to_string()),
        identity: Some(identity),
        wallet: Some(wallet),
        balance: Some(balance),
        trace_id: Uuid::now_v7(),
    })
}

/// `customer.identified`, for a resolution that found a wallet.
pub fn identified_event(
    r: &Resolution,
    acting: &Acting,
    credential_type: &str,
    session_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Option<NewOutbox> {
    let (identity, wallet) = (r.identity.as_ref()?, r.wallet.as_ref()?);
    Some(NewOutbox {
        kind: OutboxKind::Event,
        topic: "customer.identified".into(),
        merchant_id: Some(wallet.merchant_id),
        resource_type: "wallet_user".into(),
        resource_id: identity.id.to_string(),
        payload: json!({
            "wallet_user_id": identity.id.to_string(),
            "wallet_id": wallet.id.to_string(),
            "wallet_program_id": wallet.wallet_program_id.to_string(),
            "resolution_state": r.state.as_str(),
            "credential_type": credential_type,
            "identity_trace_id": r.trace_id.to_string(),
            "branch_id": acting.branch_id.map(|b| b.to_string()),
            "terminal_id": acting.terminal_id,
            "service_session_id": session_id.map(|s| s.to_string()),
            "decision_trace_id": acting.decision_trace_id,
        }),
        occurred_at: now,
    })
}

/// POST /identify: resolves the credential and records `customer.identified` for a known
/// wallet. Changes nothing else: no balance, grant, session or credential moves.
pub async fn identify<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    credential: &IdentityCredential,
    program: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<Resolution, ApiError> {
    require_supported(c, acting.integration_id, credential).await?;
    let r = resolve(c, sealer, acting.merchant_id, credential, program, now).await?;
    if let Some(event) = identified_event(&r, acting, credential.type_name(), None, now) {
        store::outbox::append(c, event).await?;
    }
    Ok(r)
}

pub use crate::store::ledger::WalletActivity as Activity;

/// The cashier panel's view of a customer.
#[derive(Clone, Debug)]
pub struct Lookup {
    pub resolution: Resolution,
    pub identity_state: Option<String>,
    pub recent_payments: Vec<crate::domain::payments::Payment>,
    pub recent_activity: Vec<Activity>,
    pub grants: Vec<crate::domain::incentives::grants::Grant>,
    /// Actual money the merchant holds for the customer after a lapsed enrollment.
    pub escrowed_actual_minor: i64,
}

pub const LOOKUP_RECENT: u64 = 10;

/// GET /customers/lookup: identity, balance, recent payments, money movements (top-ups,
/// refunds, grants ...) and badge. Read-only; an unknown customer is a `not_found` result.
pub async fn lookup<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    integration_id: Uuid,
    merchant: Uuid,
    credential: &IdentityCredential,
    program: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<Lookup, ApiError> {
    require_supported(c, integration_id, credential).await?;
    let mut resolution = resolve(c, sealer, merchant, credential, program, now).await?;
    let mut out = Lookup {
        identity_state: None,
        recent_payments: vec![],
        recent_activity: vec![],
        grants: vec![],
        escrowed_actual_minor: 0,
        resolution: resolution.clone(),
    };
    // A lapsed enrollment resolves as not_found for payments, but the cashier sees why
    // and what the merchant holds for the customer.
    if resolution.wallet.is_none()
        && let Some(identity) = resolution.identity.clone()
        && identity.state == EXPIRED
    {
        out.identity_state = Some(identity.state.as_str().to_string());
        for w in store::customers::wallets::wallets_of_identity(c, identity.id).await? {
            if program.is_none_or(|p| p == w.wallet_program_id) {
                out.escrowed_actual_minor += store::ledger::account_balance(
                    c,
                    crate::domain::ledger::Account::MerchantEscrow(w.id),
                )
                .await?;
            }
        }
        resolution.badge = Some("EXPIRED".into());
        resolution.identity = Some(identity);
        out.resolution = resolution;
        return Ok(out);
    }
    let (Some(identity), Some(wallet)) = (&resolution.identity, &resolution.wallet) else {
        return Ok(out);
    };
    out.identity_state = Some(identity.state.as_str().to_string());
    out.recent_payments = store::payments::recent_of_wallet(c, wallet.id, LOOKUP_RECENT)
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    out.recent_activity = store::ledger::wallet_activity(c, wallet.id, 20).await?;
    out.grants = store::customers::wallets::recent_grants(c, wallet.id, 20)
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(out)
}
