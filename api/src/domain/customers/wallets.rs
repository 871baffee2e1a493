//! Wallets as the partner sees them: the balance with its two money classes, which wallet a
//! customer identity pays from, and the operators' manual tools (import a customer, adjust
//! actual money, issue a grant), each posted through the ledger like any other movement.
use chrono::{DateTime, Utc};
use entities::{promo_grant, wallet, wallet_user};
use sea_orm::ConnectionTrait;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::domain::{
    ledger::{self, GrantState, GrantView, money},
    operators::{self, Operator},
    outbox::events::{NewOutbox, OutboxKind},
};
use crate::{error::ApiError, store};

pub use entities::{promo_grant::PromoGrantState, wallet_user::WalletUserState};
pub const PENDING_PROOF: WalletUserState = WalletUserState::PendingProof;
pub const VERIFIED: WalletUserState = WalletUserState::Verified;
/// The states an operator may give an imported identity.
pub const IMPORTABLE_STATES: &[&str] = &[VERIFIED.as_str(), PENDING_PROOF.as_str()];
/// Which way an operator's adjustment moves a wallet's money.
pub const ADJUSTMENT_DIRECTIONS: &[&str] = &["credit", "debit"];
/// The states an operator may create a grant in.
pub const OPERATOR_GRANT_STATES: &[&str] = &["RELEASED", "LOCKED"];
pub const GRANT_SOURCES: &[&str] = &["CASHBACK", "RELOAD_BONUS", "SKU_TOPUP_BONUS", "OFFER"];

#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct GrantBalance {
    pub grant_id: String,
    pub source: String,
    /// RELEASED or LOCKED (EXPIRED once past `expires_at`, until expiry processing ends it).
    pub state: String,
    pub remaining_minor: i64,
    pub expires_at: String,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Balance {
    pub actual_minor: i64,
    pub promo_available_minor: i64,
    pub promo_locked_minor: i64,
    pub pending_topups_minor: i64,
    pub currency: String,
    pub promo_grants: Vec<GrantBalance>,
}

impl Balance {
    /// What an unverified customer's wallet holds until the phone is proven.
    pub fn held(&self) -> crate::domain::customers::proof_window::Held {
        crate::domain::customers::proof_window::Held {
            actual_minor: self.actual_minor,
            promo_locked_minor: self.promo_locked_minor,
        }
    }
}

pub fn grant_state(s: PromoGrantState) -> GrantState {
    match s {
        PromoGrantState::Locked => GrantState::Locked,
        PromoGrantState::Released => GrantState::Released,
        PromoGrantState::Consumed => GrantState::Consumed,
        PromoGrantState::ClawedBack => GrantState::ClawedBack,
        PromoGrantState::Expired => GrantState::Expired,
    }
}

pub fn grant_view(g: &promo_grant::Model) -> GrantView {
    GrantView {
        id: g.id,
        state: grant_state(g.state),
        remaining_minor: g.remaining_minor,
        expires_at: g.expires_at,
        created_at: g.created_at,
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The balance of `wallet` given its live grants, at `now`.
pub fn balance(w: &wallet::Model, grants: &[promo_grant::Model], now: DateTime<Utc>) -> Balance {
    let mut b = Balance {
        actual_minor: w.actual_minor,
        promo_available_minor: 0,
        promo_locked_minor: 0,
        pending_topups_minor: w.pending_topups_minor,
        currency: w.currency.clone(),
        promo_grants: Vec::new(),
    };
    for g in grants.iter().filter(|g| g.remaining_minor > 0) {
        let expired = g.expires_at <= now;
        let state = match (g.state, expired) {
            (_, true) => PromoGrantState::Expired,
            (PromoGrantState::Locked, false) => {
                b.promo_locked_minor = b.promo_locked_minor.saturating_add(g.remaining_minor);
                PromoGrantState::Locked
            }
            (PromoGrantState::Released, false) => {
                b.promo_available_minor = b.promo_available_minor.saturating_add(g.remaining_minor);
                PromoGrantState::Released
            }
            _ => continue,
        };
        b.promo_grants.push(GrantBalance {
            grant_id: g.id.to_string(),
            source: g.source.clone(),
            state: state.as_str().into(),
            remaining_minor: g.remaining_minor,
            expires_at: ts(g.expires_at),
        });
    }
    b
}

/// Refuses a credit of `credit` that would take `w` (locked by the caller) past
/// `money::MAX_HOLDING_MINOR`, actual money and live grants together, naming `field`.
pub async fn ensure_room<C: ConnectionTrait>(
    c: &C,
    w: &wallet::Model,
    credit: i64,
    field: &str,
) -> Result<(), ApiError> {
    let grants = store::customers::wallets::live_grants(c, w.id).await?;
    let held = money::saturating_sum(
        std::iter::once(w.actual_minor).chain(grants.iter().map(|g| g.remaining_minor)),
    );
    if money::fits_in_wallet(held, credit) {
        return Ok(());
    }
    Err(ApiError::field(
        field,
        "wallet_limit",
        format!(
            "the wallet would hold more than {} (it holds {held})",
            money::MAX_HOLDING_MINOR
        ),
    ))
}

/// Reads a wallet's balance at `now` (grants expired by then are not counted).
pub async fn current_balance<C: ConnectionTrait>(
    c: &C,
    w: &wallet::Model,
    now: DateTime<Utc>,
) -> Result<Balance, ApiError> {
    let grants = store::customers::wallets::live_grants(c, w.id).await?;
    Ok(balance(w, &grants, now))
}

/// Which of the identity's wallets a call means: the one in `program` when given, else the
/// only one in `currency`. Several candidates is WALLET_PROGRAM_AMBIGUOUS; none is
/// NOT_FOUND.
pub async fn choose_wallet<C: ConnectionTrait>(
    c: &C,
    identity: &wallet_user::Model,
    currency: Option<&str>,
    program: Option<Uuid>,
) -> Result<wallet::Model, ApiError> {
    let wallets = store::customers::wallets::wallets_of_identity(c, identity.id).await?;
    let mut candidates: Vec<wallet::Model> = wallets
        .into_iter()
        .filter(|w| program.is_none_or(|p| w.wallet_program_id == p))
        .filter(|w| currency.is_none_or(|cur| w.currency == cur))
        .collect();
    match candidates.len() {
        0 => Err(ApiError::not_found("Wallet")),
        1 => Ok(candidates.remove(0)),
        _ => Err(ApiError::wallet_program_ambiguous(
            &candidates
                .iter()
                .map(|w| w.wallet_program_id.to_string())
                .collect::<Vec<_>>(),
        )),
    }
}

/// `wallet.balance_changed`, written in the transaction that moved the money.
pub fn balance_changed(
    w: &wallet::Model,
    after: &Balance,
    cause: &str,
    cause_id: Uuid,
    now: DateTime<Utc>,
) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: "wallet.balance_changed".into(),
        merchant_id: Some(w.merchant_id),
        resource_type: "wallet".into(),
        resource_id: w.id.to_string(),
        payload: json!({
            "wallet_id": w.id.to_string(),
            "wallet_user_id": w.wallet_user_id.to_string(),
            "wallet_program_id": w.wallet_program_id.to_string(),
            "cause": cause,
            "cause_id": cause_id.to_string(),
            "actual_minor": after.actual_minor,
            "promo_available_minor": after.promo_available_minor,
            "promo_locked_minor": after.promo_locked_minor,
            "currency": after.currency,
        }),
        occurred_at: now,
    }
}

/// A wallet with its owner, as the operator tools return it.
#[derive(Clone, Debug)]
pub struct WalletRecord {
    pub identity: wallet_user::Model,
    pub wallet: wallet::Model,
    pub balance: Balance,
}

/// The program a call means: `program_id` when given (it must be one of the merchant's
/// active programs), else the merchant's only active program. Several is
/// WALLET_PROGRAM_AMBIGUOUS; none is NOT_FOUND.
pub async fn program_for<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    program_id: Option<Uuid>,
) -> Result<entities::wallet_program::Model, ApiError> {
    let programs = store::tenancy::active_programs(c, &[merchant_id]).await?;
    match program_id {
        Some(p) => programs.into_iter().find(|x| x.id == p),
        None if programs.len() == 1 => programs.into_iter().next(),
        None if programs.is_empty() => None,
        None => {
            return Err(ApiError::wallet_program_ambiguous(
                &programs
                    .iter()
                    .map(|p| p.id.to_string())
                    .collect::<Vec<_>>(),
            ));
        }
    }
    .ok_or_else(|| ApiError::not_found("Wallet program"))
}

/// The identity's wallet in `program`, created (empty) if it has none yet.
pub async fn wallet_in_program<C: ConnectionTrait>(
    c: &C,
    identity: &wallet_user::Model,
    program: &entities::wallet_program::Model,
    now: DateTime<Utc>,
) -> Result<wallet::Model, ApiError> {
    let existing = store::customers::wallets::wallets_of_identity(c, identity.id).await?;
    Ok(
        match existing
            .into_iter()
            .find(|w| w.wallet_program_id == program.id)
        {
            Some(w) => w,
            None => {
                store::customers::wallets::insert_wallet(
                    c,
                    identity,
                    program.id,
                    &program.currency,
                    now,
                )
                .await?
            }
        },
    )
}

/// An operator's registration of a customer wallet: the merchant, the phone, the program
/// (default: the merchant's), the identity's state and why.
pub struct Import<'a> {
    pub merchant_id: Uuid,
    pub phone: &'a str,
    pub program_id: Option<Uuid>,
    /// `VERIFIED` or `PENDING_PROOF`.
    pub state: &'a str,
    pub reason: &'a str,
}

/// Operators: registers a customer's wallet (a migration from another loyalty system, a
/// support case). Creates the identity if the phone is new at the merchant; one wallet per
/// program. A PENDING_PROOF identity gets a pending-proof window like any other. Audited.
pub async fn import<C: ConnectionTrait>(
    c: &C,
    op: &Operator,
    asked: Import<'_>,
    proof_window: chrono::Duration,
) -> Result<WalletRecord, ApiError> {
    let Import {
        merchant_id,
        phone,
        program_id,
        state,
        reason,
    } = asked;
    let state = WalletUserState::parse(state)
        .filter(|s| [PENDING_PROOF, VERIFIED].contains(s))
        .ok_or_else(|| ApiError::field("/state", "invalid", "PENDING_PROOF or VERIFIED"))?;
    let program = program_for(c, merchant_id, program_id).await?;
    let now = Utc::now();
    let (found, created) =
        store::customers::wallets::insert_identity_if_absent(c, merchant_id, phone, state, now)
            .await?;
    let identity = store::customers::wallets::lock_identity(c, merchant_id, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let wallet = wallet_in_program(c, &identity, &program, now).await?;
    if created {
        store::outbox::append(
            c,
            crate::domain::customers::proof_window::enrolled_event(&identity, &wallet, None, now),
        )
        .await?;
    }
    if identity.state == PENDING_PROOF {
        crate::domain::customers::proof_window::open_window(
            c,
            &identity,
            program.id,
            crate::domain::customers::proof_window::Origin::Operator,
            proof_window,
            now,
        )
        .await?;
    }
    operators::audit(
        c,
        &op.actor(),
        "wallet.import",
        "wallet",
        Some(wallet.id.to_string()),
        Some(reason.to_string()),
        json!({"merchant_id": merchant_id.to_string(), "wallet_program_id": program.id.to_string(), "state": identity.state}),
    )
    .await?;
    let balance = current_balance(c, &wallet, now).await?;
    Ok(WalletRecord {
        identity,
        wallet,
        balance,
    })
}

pub async fn find_for_operator<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
) -> Result<WalletRecord, ApiError> {
    let wallet = store::customers::wallets::find_wallet_any_merchant(c, wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let identity =
        store::customers::wallets::find_identity(c, wallet.merchant_id, wallet.wallet_user_id)
            .await?
            .ok_or_else(|| ApiError::not_found("Wallet"))?;
    // Operators work on real time, whatever a sandbox tenant's test clock says.
    let balance = current_balance(c, &wallet, Utc::now()).await?;
    Ok(WalletRecord {
        identity,
        wallet,
        balance,
    })
}

/// An operator's change to a wallet's money.
pub enum Adjustment {
    /// Credit (positive) or debit (negative) of actual money.
    Actual { amount_minor: i64 },
    /// A new promotional grant.
    Grant {
        amount_minor: i64,
        source: String,
        state: String,
        expires_at: DateTime<Utc>,
    },
}

/// Operators: posts a manual adjustment through the ledger, under the wallet's lock, with
/// its balance event and an audit entry, in the caller's transaction. A debit larger than
/// the actual balance is INSUFFICIENT_FUNDS.
pub async fn adjust<C: ConnectionTrait>(
    c: &C,
    op: &Operator,
    wallet_id: Uuid,
    currency: &str,
    adjustment: Adjustment,
    reason: &str,
) -> Result<WalletRecord, ApiError> {
    let found = store::customers::wallets::find_wallet_any_merchant(c, wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let w = store::customers::wallets::lock_wallet(c, found.merchant_id, wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    if w.currency != currency {
        return Err(ApiError::currency_not_supported(std::slice::from_ref(
            &w.currency,
        )));
    }
    // A sandbox merchant's ledger runs on its test clock, whoever moves its money.
    let now = crate::domain::sandbox::test_clock::merchant_clock(c, w.merchant_id)
        .await?
        .now();
    let adjustment_id = Uuid::now_v7();
    let (is_credit, credit) = match &adjustment {
        Adjustment::Actual { amount_minor } => (*amount_minor > 0, (*amount_minor).max(0)),
        Adjustment::Grant { amount_minor, .. } => (true, *amount_minor),
    };
    ensure_room(c, &w, credit, "/amount_minor").await?;
    let (posting, details) = match adjustment {
        Adjustment::Actual { amount_minor } => {
            if w.actual_minor + amount_minor < 0 {
                return Err(ApiError::insufficient_funds(
                    -(w.actual_minor + amount_minor),
                    w.actual_minor,
                    0,
                    &w.currency,
                ));
            }
            (
                ledger::posting::adjustment(w.merchant_id, w.id, &w.currency, amount_minor),
                json!({"money_class": "actual", "amount_minor": amount_minor, "currency": w.currency}),
            )
        }
        Adjustment::Grant {
            amount_minor,
            source,
            state,
            expires_at,
        } => {
            let state = PromoGrantState::parse(&state)
                .filter(|s| matches!(s, PromoGrantState::Released | PromoGrantState::Locked))
                .ok_or_else(|| ApiError::field("/state", "invalid", "RELEASED or LOCKED"))?;
            let g = store::customers::wallets::insert_grant(
                c,
                &w,
                amount_minor,
                &source,
                state,
                expires_at,
                now,
            )
            .await?;
            (
                ledger::posting::grant_accrual(
                    w.merchant_id,
                    (&g).into(),
                    &w.currency,
                    amount_minor,
                ),
                json!({"money_class": "promo", "grant_id": g.id.to_string(), "amount_minor": amount_minor, "currency": w.currency, "source": source, "state": state.as_str()}),
            )
        }
    };
    store::ledger::post(
        c,
        &posting,
        store::ledger::Reference {
            kind: "adjustment",
            id: adjustment_id,
            memo: Some(format!("{}: {reason}", op.actor())),
            at: now,
        },
    )
    .await?;
    let wallet = store::customers::wallets::find_wallet(c, w.merchant_id, w.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let balance = current_balance(c, &wallet, now).await?;
    let identity =
        store::customers::wallets::find_identity(c, wallet.merchant_id, wallet.wallet_user_id)
            .await?
            .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let mut events = vec![balance_changed(
        &wallet,
        &balance,
        "adjustment",
        adjustment_id,
        now,
    )];
    if is_credit && identity.state != VERIFIED {
        events.push(crate::domain::customers::proof_window::credit_held_event(
            &identity,
            &wallet,
            balance.held(),
            "adjustment",
            adjustment_id,
            now,
        ));
    }
    store::outbox::append_all(c, events).await?;
    operators::audit(
        c,
        &op.actor(),
        "wallet.adjust",
        "wallet",
        Some(wallet.id.to_string()),
        Some(reason.to_string()),
        details,
    )
    .await?;
    Ok(WalletRecord {
        identity,
        wallet,
        balance,
    })
}
