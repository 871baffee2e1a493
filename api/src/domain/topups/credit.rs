//! Crediting a wallet, shared by SKU and settlement top-ups: the customer's identity (a
//! new one opens a pending-proof window), the program, the top-up posting and its bonus
//! grant, held for an unverified customer.
use chrono::{DateTime, Duration, Utc};
use entities::{promo_grant, promo_grant::PromoGrantState, wallet, wallet_program, wallet_user};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::{
    customers::enrollment::{self, Origin},
    customers::wallets::{self, Balance, PENDING_PROOF, VERIFIED},
    customers::{self, IdentityCredential},
    incentives::grant_events,
    ledger::{self, money},
    outbox::events::NewOutbox,
};
use crate::{error::ApiError, infra::crypto::Sealer, store};

/// The customer a credit goes to: the identity the credential names, or, for a phone the
/// merchant does not know yet, a new PENDING_PROOF proto-wallet identity. Returned locked.
pub(crate) async fn credit_identity<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    merchant: Uuid,
    customer: &IdentityCredential,
    now: DateTime<Utc>,
) -> Result<(wallet_user::Model, bool), ApiError> {
    let (found, created) =
        match customers::find_identity(c, sealer, merchant, customer, now).await? {
            Some((i, _)) => (i, false),
            None => match customer {
                IdentityCredential::Phone(p) => {
                    store::customers::wallets::insert_identity_if_absent(
                        c,
                        merchant,
                        p,
                        PENDING_PROOF,
                        now,
                    )
                    .await?
                }
                _ => return Err(ApiError::not_found("Customer")),
            },
        };
    let identity = store::customers::wallets::lock_identity(c, merchant, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Customer"))?;
    Ok((identity, created))
}

/// The program a credit in `currency` goes to: the one named, or the merchant's only
/// active program in that currency.
pub(crate) async fn program_for_credit<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    named: Option<Uuid>,
    currency: &str,
) -> Result<wallet_program::Model, ApiError> {
    let program = match named {
        Some(p) => wallets::program_for(c, merchant, Some(p)).await?,
        None => {
            let programs: Vec<_> = store::tenancy::active_programs(c, &[merchant])
                .await?
                .into_iter()
                .filter(|p| p.currency == currency)
                .collect();
            match programs.as_slice() {
                [only] => only.clone(),
                [] => return Err(ApiError::currency_not_supported(&[])),
                many => {
                    return Err(ApiError::wallet_program_ambiguous(
                        &many.iter().map(|p| p.id.to_string()).collect::<Vec<_>>(),
                    ));
                }
            }
        }
    };
    if program.currency != currency {
        return Err(ApiError::currency_not_supported(std::slice::from_ref(
            &program.currency,
        )));
    }
    Ok(program)
}

/// A bonus that accrues with a credit.
pub(crate) struct BonusGrant {
    pub amount: i64,
    pub source: &'static str,
    pub expires_at: DateTime<Utc>,
    /// A campaign budget that caps it: the bonus shrinks to what the budget has left.
    pub budget_id: Option<Uuid>,
}

/// A credit of actual money to a customer's wallet in a program, with its bonus.
pub(crate) struct Credit<'a> {
    pub topup_id: Uuid,
    /// Locked (see `credit_identity`).
    pub identity: wallet_user::Model,
    /// Whether `credit_identity` created the identity for this credit.
    pub created: bool,
    pub program: &'a wallet_program::Model,
    pub amount: i64,
    /// How the money came in (the ledger reports SKU and settlement loads apart).
    pub load: ledger::posting::Load,
    pub bonus: Option<BonusGrant>,
    pub memo: String,
    /// The request field a refusal names (the wallet would hold too much).
    pub field: &'static str,
    /// A credit a caller asks for now is checked against the merchant's daily top-up limit
    /// of its mode (true: sandbox); `None` for a top-up requested earlier that settled now.
    pub limit_mode: Option<bool>,
}

pub(crate) struct Credited {
    pub identity: wallet_user::Model,
    pub wallet: wallet::Model,
    pub grant: Option<promo_grant::Model>,
    pub balance: Balance,
    pub posting_id: Uuid,
    /// customer.enrolled, promo_grant.accrued, wallet.balance_changed and, for a credit
    /// held for someone still to enroll, enrollment.pending_proof; not yet appended.
    pub events: Vec<NewOutbox>,
}

/// Posts a top-up's credit and its bonus: to a VERIFIED customer's wallet with the bonus
/// RELEASED, or held in a PENDING_PROOF proto-wallet (whose window opens now) with the
/// bonus LOCKED.
pub(crate) async fn credit_wallet<C: ConnectionTrait>(
    c: &C,
    proof_window: Duration,
    cr: Credit<'_>,
    now: DateTime<Utc>,
) -> Result<Credited, ApiError> {
    let merchant = cr.identity.merchant_id;
    let mut identity = cr.identity;
    let mut events: Vec<NewOutbox> = Vec::new();
    if identity.state != VERIFIED {
        // A credit for someone who has not proven the phone: held in a proto-wallet whose
        // pending-proof window opens now (or is already open).
        if identity.state != PENDING_PROOF {
            store::customers::enrollments::set_identity_state(
                c,
                identity.id,
                PENDING_PROOF,
                None,
                now,
            )
            .await?;
            identity.state = PENDING_PROOF;
        }
        enrollment::open_window(
            c,
            &identity,
            cr.program.id,
            Origin::Credit,
            proof_window,
            now,
        )
        .await?;
    }
    let found = wallets::wallet_in_program(c, &identity, cr.program, now).await?;
    if cr.created {
        events.push(enrollment::enrolled_event(&identity, &found, None, now));
    }
    let w = store::customers::wallets::lock_wallet(c, merchant, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    if let Some(sandbox) = cr.limit_mode {
        // Under the wallet's lock: concurrent top-ups of the wallet are counted in turn.
        crate::domain::risk::limits::check_topup(c, (merchant, sandbox), w.id, cr.amount, now)
            .await?;
    }
    // The budget after the wallet: the lock order every accrual keeps.
    let bonus = match cr.bonus {
        Some(b) => {
            let amount = match b.budget_id {
                Some(id) => {
                    crate::domain::incentives::budgets::spend(
                        c,
                        merchant,
                        id,
                        b.amount,
                        crate::domain::incentives::budgets::Take::UpTo,
                        now,
                    )
                    .await?
                }
                None => b.amount,
            };
            Some(BonusGrant { amount, ..b })
        }
        None => None,
    };
    let bonus_minor = bonus.as_ref().map_or(0, |b| b.amount);
    wallets::ensure_room(
        c,
        &w,
        money::sum([cr.amount, bonus_minor]).unwrap_or(i64::MAX),
        cr.field,
    )
    .await?;
    let posting_id = store::ledger::post(
        c,
        &ledger::posting::topup(cr.load, merchant, w.id, &w.currency, cr.amount),
        store::ledger::Reference {
            kind: "topup",
            id: cr.topup_id,
            memo: Some(cr.memo),
            at: now,
        },
    )
    .await?;
    let grant = match bonus {
        Some(b) if b.amount > 0 => {
            let state = if identity.state == VERIFIED {
                PromoGrantState::Released
            } else {
                PromoGrantState::Locked
            };
            let g = store::customers::wallets::insert_grant(
                c,
                &w,
                b.amount,
                b.source,
                state,
                b.expires_at,
                now,
            )
            .await?;
            store::ledger::post(
                c,
                &ledger::posting::grant_accrual(merchant, (&g).into(), &w.currency, b.amount),
                store::ledger::Reference {
                    kind: "topup",
                    id: cr.topup_id,
                    memo: Some(b.source.to_ascii_lowercase()),
                    at: now,
                },
            )
            .await?;
            let mut g = g;
            g.remaining_minor = b.amount;
            events.push(grant_events::accrued_event(&g, &w, cr.topup_id, now));
            Some(g)
        }
        _ => None,
    };
    let w = store::customers::wallets::find_wallet(c, merchant, w.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let balance = wallets::current_balance(c, &w, now).await?;
    events.push(wallets::balance_changed(
        &w,
        &balance,
        "topup",
        cr.topup_id,
        now,
    ));
    if identity.state != VERIFIED {
        events.push(enrollment::credit_held_event(
            &identity,
            &w,
            balance.held(),
            "topup",
            cr.topup_id,
            now,
        ));
    }
    Ok(Credited {
        identity,
        wallet: w,
        grant,
        balance,
        posting_id,
        events,
    })
}
