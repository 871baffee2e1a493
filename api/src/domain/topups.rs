//! Top-ups from SKU sales at the POS: the SKU registry (what a unit credits and its bonus)
//! and the credit itself. A SKU change bumps its version and applies to later sales only:
//! every top-up keeps the terms it was credited with.
//!
//! One POS order credits once: the top-up claims (merchant, pos_order_ref) with a row in
//! its own transaction before anything else, so concurrent reports of the order queue on
//! that claim and the later ones return the first one's result.
use chrono::{DateTime, Duration, Utc};
use entities::{promo_grant, sku, topup, wallet, wallet_program, wallet_user};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use super::{
    caller::Caller,
    checkout,
    customers::{self, IdentityCredential},
    enrollment::{self, Origin},
    events::{NewOutbox, OutboxKind},
    grant_events, ledger, money,
    wallets::{self, Balance, PENDING_PROOF, VERIFIED},
};
use crate::{error::ApiError, infra::crypto::Sealer, store};

/// Lifetime of a bonus when the SKU names none.
pub const DEFAULT_BONUS_DAYS: i32 = 365;

/// A SKU's bonus per sale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bonus {
    /// A fixed amount per unit sold.
    PerUnit(i64),
    /// Basis points of the credit (rounded down).
    PercentBps(i32),
}

impl Bonus {
    /// The bonus on a sale of `quantity` units crediting `credit`; None when it would
    /// exceed the largest amount (the sale is refused).
    pub fn amount(self, quantity: i64, credit: i64) -> Option<i64> {
        match self {
            Bonus::PerUnit(m) => money::times(m, quantity),
            Bonus::PercentBps(bps) => money::basis_points(credit, bps),
        }
    }
}

pub fn bonus_of(s: &sku::Model) -> Option<Bonus> {
    match (s.bonus_minor, s.bonus_percent_bps) {
        (Some(m), _) if m > 0 => Some(Bonus::PerUnit(m)),
        (_, Some(b)) if b > 0 => Some(Bonus::PercentBps(b)),
        _ => None,
    }
}

#[derive(Clone, Debug)]
pub struct SkuTerms {
    pub sku_id: String,
    pub name: String,
    pub currency: String,
    pub wallet_credits_minor: i64,
    pub bonus: Option<Bonus>,
    pub bonus_expiry_days: Option<i32>,
    pub active: bool,
}

/// POST /skus: registers a SKU, or changes one (version + 1; past sales keep their terms).
/// Returns the SKU and whether it was new.
pub async fn register_sku<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    merchant: Uuid,
    t: SkuTerms,
    now: DateTime<Utc>,
) -> Result<(sku::Model, bool), ApiError> {
    super::currencies::require_currency(c, merchant, &t.currency).await?;
    let (bonus_minor, bonus_percent_bps) = match t.bonus {
        Some(Bonus::PerUnit(m)) => (Some(m), None),
        Some(Bonus::PercentBps(b)) => (None, Some(b)),
        None => (None, None),
    };
    let fresh = sku::Model {
        id: Uuid::now_v7(),
        merchant_id: merchant,
        integration_id,
        sku_id: t.sku_id.clone(),
        name: t.name.clone(),
        currency: t.currency.clone(),
        wallet_credits_minor: t.wallet_credits_minor,
        bonus_minor,
        bonus_percent_bps,
        bonus_expiry_days: t.bonus_expiry_days,
        active: t.active,
        version: 1,
        created_at: now,
        updated_at: now,
    };
    if store::topups::insert_sku_if_absent(c, fresh.clone()).await? {
        return Ok((fresh, true));
    }
    let mut s = store::topups::lock_sku(c, merchant, &t.sku_id)
        .await?
        .ok_or_else(|| ApiError::not_found("SKU"))?;
    let unchanged = s.name == t.name
        && s.currency == t.currency
        && s.wallet_credits_minor == t.wallet_credits_minor
        && s.bonus_minor == bonus_minor
        && s.bonus_percent_bps == bonus_percent_bps
        && s.bonus_expiry_days == t.bonus_expiry_days
        && s.active == t.active;
    if unchanged {
        return Ok((s, false));
    }
    s.name = t.name;
    s.currency = t.currency;
    s.wallet_credits_minor = t.wallet_credits_minor;
    s.bonus_minor = bonus_minor;
    s.bonus_percent_bps = bonus_percent_bps;
    s.bonus_expiry_days = t.bonus_expiry_days;
    s.active = t.active;
    s.version += 1;
    s.updated_at = now;
    Ok((store::topups::update_sku(c, s).await?, false))
}

/// A page of the merchant's SKUs, oldest first.
pub async fn list_skus<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    after: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<sku::Model>, bool), ApiError> {
    let rows = store::topups::skus_page(c, merchant, after, limit + 1).await?;
    Ok(super::page_of(rows, limit))
}

#[derive(Clone, Debug)]
pub struct SkuTopup {
    pub sku_id: String,
    pub pos_order_ref: String,
    pub customer: IdentityCredential,
    pub quantity: i64,
    pub wallet_program_id: Option<Uuid>,
    pub service_session_id: Option<Uuid>,
}

fn fingerprint(req: &SkuTopup) -> String {
    crate::infra::crypto::sha256_hex(
        format!(
            "{}|{}|{:?}|{:?}",
            req.sku_id, req.quantity, req.customer, req.wallet_program_id
        )
        .as_bytes(),
    )
}

/// A top-up's result as the partner sees it (stored with the top-up, so every report of
/// the order gets the same answer).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TopupOutcome {
    pub topup_id: String,
    pub status: String,
    pub sku_id: String,
    pub sku_version: i32,
    pub quantity: i64,
    pub pos_order_ref: String,
    pub wallet_id: String,
    pub wallet_user_id: String,
    /// VERIFIED, or PENDING_PROOF when the credit is held for a customer still to enroll.
    pub customer_state: String,
    pub credited_actual_minor: i64,
    pub bonus_minor: i64,
    pub bonus_grant_id: Option<String>,
    /// RELEASED, or LOCKED while the customer has not proven the phone.
    pub bonus_state: Option<String>,
    pub bonus_expires_at: Option<String>,
    pub currency: String,
    pub balance_after: Balance,
    pub created_at: String,
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn order_reused() -> ApiError {
    ApiError::field(
        "/pos_order_ref",
        "already_used",
        "was already reported for a different sale (another SKU, quantity or customer)",
    )
}

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
                    store::wallets::insert_identity_if_absent(c, merchant, p, PENDING_PROOF, now)
                        .await?
                }
                _ => return Err(ApiError::not_found("Customer")),
            },
        };
    let identity = store::wallets::lock_identity(c, merchant, found.id)
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
    pub bonus: Option<BonusGrant>,
    pub memo: String,
    /// The request field a refusal names (the wallet would hold too much).
    pub field: &'static str,
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
            store::enrollments::set_identity_state(c, identity.id, PENDING_PROOF, None, now)
                .await?;
            identity.state = PENDING_PROOF.into();
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
    let w = store::wallets::lock_wallet(c, merchant, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    // The budget after the wallet: the lock order every accrual keeps.
    let bonus = match cr.bonus {
        Some(b) => {
            let amount = match b.budget_id {
                Some(id) => {
                    super::budgets::spend(
                        c,
                        merchant,
                        id,
                        b.amount,
                        super::budgets::Take::UpTo,
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
        &ledger::posting::topup(merchant, w.id, &w.currency, cr.amount),
        store::ledger::Reference {
            kind: "topup",
            id: cr.topup_id,
            memo: Some(cr.memo),
        },
    )
    .await?;
    let grant = match bonus {
        Some(b) if b.amount > 0 => {
            let state = if identity.state == VERIFIED {
                "RELEASED"
            } else {
                "LOCKED"
            };
            let g =
                store::wallets::insert_grant(c, &w, b.amount, b.source, state, b.expires_at, now)
                    .await?;
            store::ledger::post(
                c,
                &ledger::posting::grant_accrual(merchant, g.id, &w.currency, b.amount),
                store::ledger::Reference {
                    kind: "topup",
                    id: cr.topup_id,
                    memo: Some(b.source.to_ascii_lowercase()),
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
    let w = store::wallets::find_wallet(c, merchant, w.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    let balance = wallets::current_balance(c, &w).await?;
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

/// POST /topup/sku/{skuId}: credits quantity × the SKU's credit as actual money and accrues
/// its bonus as a SKU_TOPUP_BONUS grant in the same transaction: RELEASED for a VERIFIED
/// customer; LOCKED, with the credit held in a PENDING_PROOF proto-wallet (created if
/// absent), for anyone else. A repeated report of the order returns the first result.
pub async fn topup_sku<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    caller: &Caller,
    proof_window: Duration,
    req: SkuTopup,
    now: DateTime<Utc>,
) -> Result<TopupOutcome, ApiError> {
    let merchant = caller.acting.merchant_id;
    let sku = store::topups::find_sku(c, merchant, &req.sku_id)
        .await?
        .filter(|s| s.active)
        .ok_or_else(|| ApiError::not_found("SKU"))?;
    customers::require_supported(c, caller.integration_id, &req.customer).await?;
    let fp = fingerprint(&req);
    let id = Uuid::now_v7();
    let placeholder = topup::Model {
        id,
        merchant_id: merchant,
        integration_id: caller.integration_id,
        kind: "sku".into(),
        order_ref: req.pos_order_ref.clone(),
        sku_id: Some(sku.sku_id.clone()),
        sku_version: Some(sku.version),
        quantity: Some(req.quantity),
        wallet_id: Uuid::nil(),
        wallet_user_id: Uuid::nil(),
        credited_actual_minor: 0,
        bonus_minor: 0,
        bonus_grant_id: None,
        currency: sku.currency.clone(),
        fingerprint: fp.clone(),
        result: json!({}),
        branch_id: caller.acting.branch_id,
        terminal_id: caller.terminal_id.clone(),
        cashier_id: caller.acting.cashier_id.clone(),
        service_session_id: req.service_session_id,
        posting_id: Uuid::nil(),
        created_at: now,
        bonus_config_version: None,
        status: CREDITED.into(),
    };
    if !store::topups::claim(c, placeholder.clone()).await? {
        let first = store::topups::find_by_order(c, merchant, "sku", &req.pos_order_ref)
            .await?
            .ok_or_else(|| ApiError::conflict("The order is being credited; retry."))?;
        if first.fingerprint != fp {
            return Err(order_reused());
        }
        return serde_json::from_value(first.result).map_err(ApiError::internal);
    }
    let session = match req.service_session_id {
        Some(s) => Some(checkout::hold(c, caller, s, now).await?),
        None => None,
    };
    let (identity, created) = credit_identity(c, sealer, merchant, &req.customer, now).await?;
    if let Some(s) = &session {
        checkout::check_customer(s, identity.id, "/customer")?;
    }
    let program = program_for_credit(c, merchant, req.wallet_program_id, &sku.currency).await?;
    let too_large = |what: &str| {
        ApiError::field(
            "/quantity",
            "too_large",
            format!(
                "the {what} would exceed the largest amount ({})",
                money::MAX_AMOUNT_MINOR
            ),
        )
    };
    let credit =
        money::times(sku.wallet_credits_minor, req.quantity).ok_or_else(|| too_large("credit"))?;
    let bonus = match bonus_of(&sku) {
        Some(b) => b
            .amount(req.quantity, credit)
            .ok_or_else(|| too_large("bonus"))?,
        None => 0,
    };
    let days = sku.bonus_expiry_days.unwrap_or(DEFAULT_BONUS_DAYS);
    let Credited {
        identity,
        wallet: w,
        grant,
        balance,
        posting_id,
        mut events,
    } = credit_wallet(
        c,
        proof_window,
        Credit {
            topup_id: id,
            identity,
            created,
            program: &program,
            amount: credit,
            bonus: (bonus > 0).then(|| BonusGrant {
                amount: bonus,
                source: "SKU_TOPUP_BONUS",
                expires_at: now + Duration::days(i64::from(days)),
                budget_id: None,
            }),
            memo: format!(
                "sku {} x{} order {}",
                sku.sku_id, req.quantity, req.pos_order_ref
            ),
            field: "/quantity",
        },
        now,
    )
    .await?;
    events.push(NewOutbox {
        kind: OutboxKind::Event,
        topic: "topup.confirmed".into(),
        merchant_id: Some(merchant),
        resource_type: "topup".into(),
        resource_id: id.to_string(),
        payload: json!({
            "topup_id": id.to_string(),
            "kind": "sku",
            "wallet_id": w.id.to_string(),
            "credited_actual_minor": credit,
            "bonus_minor": bonus,
            "currency": w.currency,
            "sku_id": sku.sku_id,
            "quantity": req.quantity,
            "pos_order_ref": req.pos_order_ref,
        }),
        occurred_at: now,
    });
    store::outbox::append_all(c, events).await?;
    let outcome = TopupOutcome {
        topup_id: id.to_string(),
        status: "credited".into(),
        sku_id: sku.sku_id.clone(),
        sku_version: sku.version,
        quantity: req.quantity,
        pos_order_ref: req.pos_order_ref.clone(),
        wallet_id: w.id.to_string(),
        wallet_user_id: identity.id.to_string(),
        customer_state: identity.state.clone(),
        credited_actual_minor: credit,
        bonus_minor: bonus,
        bonus_grant_id: grant.as_ref().map(|g| g.id.to_string()),
        bonus_state: grant.as_ref().map(|g| g.state.clone()),
        bonus_expires_at: grant.as_ref().map(|g| ts(g.expires_at)),
        currency: w.currency.clone(),
        balance_after: balance,
        created_at: ts(now),
    };
    store::topups::update(
        c,
        topup::Model {
            wallet_id: w.id,
            wallet_user_id: identity.id,
            credited_actual_minor: credit,
            bonus_minor: bonus,
            bonus_grant_id: grant.as_ref().map(|g| g.id),
            posting_id,
            result: serde_json::to_value(&outcome).map_err(ApiError::internal)?,
            ..placeholder
        },
    )
    .await?;
    Ok(outcome)
}

/// A top-up's status: credited (SKU top-ups always are).
pub const CREDITED: &str = "credited";
/// Requested against a settlement still PENDING: shown in `pending_topups_minor`.
pub const PENDING: &str = "pending";
/// Its settlement FAILED: nothing was credited.
pub const FAILED: &str = "failed";
/// Credited, then taken back (a chargeback, or detached from a customer): see
/// `topup_reversals`.
pub const REVERSED: &str = "reversed";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bonus_is_per_unit_or_basis_points_of_the_credit_rounded_down() {
        assert_eq!(Bonus::PerUnit(150).amount(3, 3_000), Some(450));
        assert_eq!(Bonus::PercentBps(1_000).amount(2, 2_000), Some(200));
        assert_eq!(Bonus::PercentBps(333).amount(1, 1_000), Some(33));
        assert_eq!(Bonus::PercentBps(1).amount(1, 99), Some(0));
        // Issue 25: a per-unit bonus of 10^12 on a million units is 10^18; refused.
        assert_eq!(
            Bonus::PerUnit(money::MAX_AMOUNT_MINOR).amount(1_000_000, 1_000_000),
            None
        );
        assert_eq!(
            Bonus::PercentBps(100_000).amount(1, money::MAX_AMOUNT_MINOR),
            None
        );
    }

    proptest::proptest! {
        /// Issue 25, point 3: whatever a SKU says and however many units sell, a sale's
        /// credit and bonus are each the exact figure within the largest amount, or the
        /// sale is refused; never a wrapped or negative number.
        #[test]
        fn a_sales_credit_and_bonus_are_exact_and_bounded_or_refused(
            unit in 1..=money::MAX_AMOUNT_MINOR,
            per_unit in 1..=money::MAX_AMOUNT_MINOR,
            bps in 1..=100_000i32,
            quantity in proptest::prelude::any::<i64>(),
        ) {
            let max = i128::from(money::MAX_AMOUNT_MINOR);
            let credit = money::times(unit, quantity);
            let exact = i128::from(unit) * i128::from(quantity);
            match credit {
                Some(c) => proptest::prop_assert_eq!(i128::from(c), exact),
                None => proptest::prop_assert!(exact < 0 || exact > max),
            }
            if let Some(c) = credit {
                for bonus in [Bonus::PerUnit(per_unit), Bonus::PercentBps(bps)] {
                    let exact = match bonus {
                        Bonus::PerUnit(m) => i128::from(m) * i128::from(quantity),
                        Bonus::PercentBps(b) => i128::from(c) * i128::from(b) / 10_000,
                    };
                    match bonus.amount(quantity, c) {
                        Some(v) => proptest::prop_assert_eq!(i128::from(v), exact),
                        None => proptest::prop_assert!(exact < 0 || exact > max),
                    }
                }
            }
        }
    }
}
