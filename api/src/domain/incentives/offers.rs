//! Offers (beta): a reward armed for one customer (offer.armed), evaluated against a basket
//! without writing anything, redeemed once against a completed payment of that customer
//! (a RELEASED OFFER grant, offer.redeemed) or expiring unredeemed (offer.expired).
//!
//! A redemption takes its whole reward from the offer's campaign budget or fails: an offer
//! promises a specific reward, so it never pays out a part. One offer per payment. The
//! reward is the payment's: a refund or void takes back its share (see `rewards`).
use crate::store::Db;
use chrono::{DateTime, Duration, Utc};
use entities::{offer, payment::PaymentStatus};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::{
    credentials::Principal,
    credentials::scope::Acting,
    customers::wallets::{self, Balance},
    customers::{self, IdentityCredential},
    incentives::budgets::{self, Take},
    incentives::rewards,
    ledger::{self, money},
    outbox::events::{NewOutbox, OutboxKind},
    payments, topups,
};
use crate::{error::ApiError, infra::crypto::Sealer, store};

pub use entities::offer::OfferState;
pub const ARMED: OfferState = OfferState::Armed;
pub const REDEEMED: OfferState = OfferState::Redeemed;
pub const EXPIRED: OfferState = OfferState::Expired;
pub const CANCELLED: OfferState = OfferState::Cancelled;
/// The states a list may filter on, as the contract spells them.
pub const STATES: &[&str] = &["ARMED", "REDEEMED", "EXPIRED", "CANCELLED"];
pub const GRANT_SOURCE: &str = "OFFER";
pub const DEFAULT_GRANT_DAYS: i32 = 90;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reward {
    /// A fixed amount.
    Fixed(i64),
    /// Basis points of the payment, rounded down, optionally capped.
    Percent { bps: i32, max_minor: Option<i64> },
}

impl Reward {
    pub fn of(o: &offer::Model) -> Reward {
        match (o.reward_minor, o.reward_bps) {
            (Some(m), _) => Reward::Fixed(m),
            (_, bps) => Reward::Percent {
                bps: bps.unwrap_or(0),
                max_minor: o.max_reward_minor,
            },
        }
    }

    /// The reward on a payment of `amount`; None when it would exceed the largest amount.
    pub fn on(self, amount: i64) -> Option<i64> {
        match self {
            Reward::Fixed(m) => money::bounded(i128::from(m)),
            Reward::Percent { bps, max_minor } => {
                let raw = money::basis_points(amount, bps)?;
                Some(max_minor.map_or(raw, |m| raw.min(m)))
            }
        }
    }
}

/// The state a reader sees: an ARMED offer past its expiry is EXPIRED at once, before the
/// sweep writes it.
pub fn state_at(o: &offer::Model, now: DateTime<Utc>) -> OfferState {
    if o.state == ARMED && o.expires_at <= now {
        EXPIRED
    } else {
        o.state
    }
}

/// An offer and where it stands, as a reader sees it at a moment: the domain's read model,
/// so the HTTP edge names no table.
#[derive(Clone, Debug)]
pub struct Offer {
    pub id: Uuid,
    pub merchant_id: Uuid,
    /// As of the moment read: an ARMED offer past `expires_at` is EXPIRED (`state_at`).
    pub state: OfferState,
    pub wallet_user_id: Uuid,
    pub wallet_program_id: Uuid,
    pub name: String,
    pub currency: String,
    /// The reward as armed: a fixed `reward_minor`, or `reward_bps` of the payment capped
    /// by `max_reward_minor`.
    pub reward_minor: Option<i64>,
    pub reward_bps: Option<i32>,
    pub max_reward_minor: Option<i64>,
    pub min_amount_minor: i64,
    pub expires_at: DateTime<Utc>,
    pub budget_id: Option<Uuid>,
    /// Lifetime of the reward grant in days.
    pub grant_expiry_days: i32,
    /// Set once redeemed: the payment, its reward grant, the reward and when.
    pub payment_id: Option<Uuid>,
    pub grant_id: Option<Uuid>,
    pub rewarded_minor: Option<i64>,
    pub redeemed_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl Offer {
    /// The offer as read at `now`.
    fn at(o: offer::Model, now: DateTime<Utc>) -> Self {
        Offer {
            id: o.id,
            merchant_id: o.merchant_id,
            state: state_at(&o, now),
            wallet_user_id: o.wallet_user_id,
            wallet_program_id: o.wallet_program_id,
            name: o.name,
            currency: o.currency,
            reward_minor: o.reward_minor,
            reward_bps: o.reward_bps,
            max_reward_minor: o.max_reward_minor,
            min_amount_minor: o.min_amount_minor,
            expires_at: o.expires_at,
            budget_id: o.budget_id,
            grant_expiry_days: o.grant_expiry_days,
            payment_id: o.payment_id,
            grant_id: o.grant_id,
            rewarded_minor: o.rewarded_minor,
            redeemed_at: o.redeemed_at,
            created_at: o.created_at,
        }
    }
}

#[derive(Clone, Debug)]
pub struct NewOffer {
    pub named: Vec<IdentityCredential>,
    pub wallet_program_id: Option<Uuid>,
    pub name: String,
    pub currency: String,
    pub reward: Reward,
    pub min_amount_minor: i64,
    pub expires_at: DateTime<Utc>,
    pub budget_id: Option<Uuid>,
    pub grant_expiry_days: Option<i32>,
}

fn offer_event(
    topic: &str,
    o: &offer::Model,
    extra: serde_json::Value,
    now: DateTime<Utc>,
) -> NewOutbox {
    let mut data = json!({
        "offer_id": o.id.to_string(),
        "wallet_user_id": o.wallet_user_id.to_string(),
        "wallet_program_id": o.wallet_program_id.to_string(),
        "name": o.name,
        "state": o.state.as_str(),
        "currency": o.currency,
        "expires_at": o.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    if let (Some(d), Some(x)) = (data.as_object_mut(), extra.as_object()) {
        d.extend(x.clone());
    }
    NewOutbox {
        kind: OutboxKind::Event,
        topic: topic.into(),
        merchant_id: Some(o.merchant_id),
        resource_type: "offer".into(),
        resource_id: o.id.to_string(),
        payload: data,
        occurred_at: now,
    }
}

/// Arms an offer for a known customer (offer.armed).
pub async fn arm<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    n: NewOffer,
    now: DateTime<Utc>,
) -> Result<Offer, ApiError> {
    let merchant = acting.merchant_id;
    if n.expires_at <= now {
        return Err(ApiError::field(
            "/expires_at",
            "must_be_future",
            "must be in the future",
        ));
    }
    let identity = customers::find_named(c, sealer, acting, &n.named, now).await?;
    let program = topups::program_for_credit(c, merchant, n.wallet_program_id, &n.currency).await?;
    if let Some(b) = n.budget_id {
        let budget = budgets::get(c, merchant, b).await?;
        if budget.currency != n.currency {
            return Err(ApiError::field(
                "/budget_id",
                "currency_mismatch",
                format!("is a budget in {}", budget.currency),
            ));
        }
    }
    let (reward_minor, reward_bps, max_reward_minor) = match n.reward {
        Reward::Fixed(m) => (Some(m), None, None),
        Reward::Percent { bps, max_minor } => (None, Some(bps), max_minor),
    };
    let o = offer::Model {
        id: Uuid::now_v7(),
        merchant_id: merchant,
        integration_id: acting.integration_id,
        wallet_user_id: identity.id,
        wallet_program_id: program.id,
        name: n.name,
        currency: n.currency,
        reward_minor,
        reward_bps,
        max_reward_minor,
        min_amount_minor: n.min_amount_minor,
        grant_expiry_days: n.grant_expiry_days.unwrap_or(DEFAULT_GRANT_DAYS),
        budget_id: n.budget_id,
        state: ARMED,
        expires_at: n.expires_at,
        payment_id: None,
        grant_id: None,
        rewarded_minor: None,
        redeemed_at: None,
        created_at: now,
        updated_at: now,
    };
    store::incentives::insert_offer(c, o.clone()).await?;
    store::outbox::append_all(c, vec![offer_event("offer.armed", &o, json!({}), now)]).await?;
    Ok(Offer::at(o, now))
}

/// The merchant's offer `id` as read at `now`.
pub async fn show<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<Offer, ApiError> {
    store::incentives::find_offer(c, merchant, id)
        .await?
        .map(|o| Offer::at(o, now))
        .ok_or_else(|| ApiError::not_found("Offer"))
}

/// A page of the merchant's offers (filtered by the stored state), as read at `now`.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    wallet_user_id: Option<Uuid>,
    state: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
    now: DateTime<Utc>,
) -> Result<(Vec<Offer>, bool), ApiError> {
    let rows = store::incentives::offers_page(c, merchant, wallet_user_id, state, after, limit + 1)
        .await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    Ok((rows.into_iter().map(|o| Offer::at(o, now)).collect(), more))
}

/// One armed offer measured against a prospective payment.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub offer: Offer,
    pub reward_minor: i64,
    /// None when it would apply; else why not: currency_mismatch, below_minimum,
    /// budget_exhausted.
    pub ineligible: Option<&'static str>,
}

/// Which of the customer's armed offers a payment of `amount` in `currency` would earn, and
/// how much. Reads only.
pub async fn evaluate<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    named: &[IdentityCredential],
    amount: i64,
    currency: &str,
    now: DateTime<Utc>,
) -> Result<(Uuid, Vec<Evaluation>), ApiError> {
    let merchant = acting.merchant_id;
    let identity = customers::find_named(c, sealer, acting, named, now).await?;
    let mut out = Vec::new();
    for o in store::incentives::armed_offers(c, merchant, identity.id).await? {
        if o.expires_at <= now {
            continue;
        }
        let computed = Reward::of(&o).on(amount);
        let reward = computed.unwrap_or(0);
        let ineligible = if o.currency != currency {
            Some("currency_mismatch")
        } else if computed.is_none() {
            Some("too_large")
        } else if amount < o.min_amount_minor {
            Some("below_minimum")
        } else {
            match o.budget_id {
                Some(b) => {
                    let budget = budgets::get(c, merchant, b).await?;
                    (!budget.active || budget.limit_minor - budget.spent_minor < reward)
                        .then_some("budget_exhausted")
                }
                None => None,
            }
        };
        out.push(Evaluation {
            offer: Offer::at(o, now),
            reward_minor: reward,
            ineligible,
        });
    }
    Ok((identity.id, out))
}

fn not_armed(o: &offer::Model, now: DateTime<Utc>) -> ApiError {
    let state = state_at(o, now).to_string();
    ApiError::field(
        "path:offerId",
        "offer_not_armed",
        format!("the offer is {state}"),
    )
    .with_details(json!({
        "fields": [{"field": "path:offerId", "issue": "offer_not_armed",
                    "message": format!("the offer is {state}")}],
        "offer_state": state,
    }))
}

#[derive(Clone, Debug)]
pub struct Redeemed {
    pub offer: Offer,
    pub grant: crate::domain::incentives::grants::Grant,
    pub balance_after: Balance,
}

/// Redeems an armed offer against a completed payment of its customer, made after the
/// offer was armed: the reward (on what the payment still holds after refunds) accrues as
/// a RELEASED OFFER grant, taken whole from the offer's budget.
pub async fn redeem<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    acting: &Acting,
    offer_id: Uuid,
    payment_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Redeemed, ApiError> {
    let merchant = acting.merchant_id;
    let o = store::incentives::lock_offer(c, merchant, offer_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Offer"))?;
    if state_at(&o, now) != ARMED {
        return Err(not_armed(&o, now));
    }
    let p = store::payments::lock(c, merchant, payment_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Payment"))?;
    if !payments::visible(c, principal, &p).await? {
        return Err(ApiError::not_found("Payment"));
    }
    let bad = |issue: &str, message: &str| ApiError::field("/payment_id", issue, message);
    if p.status != PaymentStatus::Completed {
        return Err(bad("payment_not_completed", "is voided"));
    }
    if p.created_at < o.created_at {
        return Err(bad(
            "payment_before_offer",
            "was made before the offer was armed",
        ));
    }
    let w = store::customers::wallets::lock_wallet(c, merchant, p.wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Wallet"))?;
    if w.wallet_user_id != o.wallet_user_id {
        return Err(bad("other_customer", "is another customer's payment"));
    }
    if p.currency != o.currency {
        return Err(bad(
            "currency_mismatch",
            "is in another currency than the offer",
        ));
    }
    let net = p.amount_minor - p.refunded_minor;
    if net < o.min_amount_minor {
        return Err(bad(
            "below_minimum",
            &format!(
                "holds {net}, below the offer's minimum {}",
                o.min_amount_minor
            ),
        ));
    }
    if store::incentives::offer_for_payment(c, p.id)
        .await?
        .is_some()
    {
        return Err(bad(
            "payment_already_rewarded",
            "already redeemed an offer (offers do not stack)",
        ));
    }
    let reward = Reward::of(&o)
        .on(net)
        .ok_or_else(|| bad("too_large", "its reward would exceed the largest amount"))?;
    if reward <= 0 {
        return Err(bad("no_reward", "earns no reward under this offer"));
    }
    wallets::ensure_room(c, &w, reward, "/payment_id").await?;
    if let Some(b) = o.budget_id
        && budgets::spend(c, merchant, b, reward, Take::Exactly, now).await? == 0
    {
        return Err(ApiError::field(
            "/",
            "budget_exhausted",
            "the offer's campaign budget cannot cover the reward",
        ));
    }
    let mut g = store::customers::wallets::insert_grant(
        c,
        &w,
        reward,
        GRANT_SOURCE,
        entities::promo_grant::PromoGrantState::Released,
        now + Duration::days(i64::from(o.grant_expiry_days)),
        now,
    )
    .await?;
    store::ledger::post(
        c,
        &ledger::posting::grant_accrual(merchant, (&g).into(), &w.currency, reward),
        store::ledger::Reference {
            kind: "offer",
            id: o.id,
            memo: Some(o.name.clone()),
            at: now,
        },
    )
    .await?;
    g.remaining_minor = reward;
    rewards::record(c, &p, rewards::OFFER, o.id, &g, o.budget_id, now).await?;
    let mut o = o;
    o.state = REDEEMED;
    o.payment_id = Some(p.id);
    o.grant_id = Some(g.id);
    o.rewarded_minor = Some(reward);
    o.redeemed_at = Some(now);
    o.updated_at = now;
    store::incentives::update_offer(c, o.clone()).await?;
    let balance_after = wallets::current_balance(c, &w, now).await?;
    store::outbox::append_all(
        c,
        vec![
            offer_event(
                "offer.redeemed",
                &o,
                json!({"payment_id": p.id.to_string(), "reward_minor": reward,
                       "grant_id": g.id.to_string()}),
                now,
            ),
            crate::domain::incentives::grant_events::accrued_event(&g, &w, o.id, now),
            wallets::balance_changed(&w, &balance_after, "offer", o.id, now),
        ],
    )
    .await?;
    Ok(Redeemed {
        offer: Offer::at(o, now),
        grant: g.into(),
        balance_after,
    })
}

/// Withdraws an armed offer. Cancelling a cancelled offer changes nothing.
pub async fn cancel<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<Offer, ApiError> {
    let mut o = store::incentives::lock_offer(c, merchant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Offer"))?;
    if o.state == CANCELLED {
        return Ok(Offer::at(o, now));
    }
    if state_at(&o, now) != ARMED {
        return Err(not_armed(&o, now));
    }
    o.state = CANCELLED;
    o.updated_at = now;
    store::incentives::update_offer(c, o.clone()).await?;
    Ok(Offer::at(o, now))
}

/// Expires armed offers past `expires_at` (offer.expired), each in its own transaction; the
/// conditional state change makes it safe on any number of workers at once.
pub async fn expire_due(
    db: &Db,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
) -> Result<usize, ApiError> {
    let mut expired = 0;
    loop {
        let due = store::incentives::due_offers(db, now, merchants, 200).await?;
        let batch = due.len();
        for o in due {
            let txn = store::begin(db).await?;
            if store::incentives::end_armed_offer(&txn, o.id, EXPIRED, now).await? {
                let mut o = o;
                o.state = EXPIRED;
                store::outbox::append_all(
                    &txn,
                    vec![offer_event("offer.expired", &o, json!({}), now)],
                )
                .await?;
                expired += 1;
            }
            txn.commit().await?;
        }
        if batch < 200 {
            return Ok(expired);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percent_reward_is_rounded_down_and_capped_a_fixed_one_is_fixed() {
        assert_eq!(Reward::Fixed(500).on(1), Some(500));
        assert_eq!(
            Reward::Percent {
                bps: 1_000,
                max_minor: None
            }
            .on(2_345),
            Some(234)
        );
        assert_eq!(
            Reward::Percent {
                bps: 1_000,
                max_minor: Some(100)
            }
            .on(2_345),
            Some(100)
        );
        assert_eq!(
            Reward::Percent {
                bps: i32::MAX,
                max_minor: None
            }
            .on(money::MAX_AMOUNT_MINOR),
            None
        );
    }

    proptest::proptest! {
        /// An offer's reward on any payment is exact and bounded, or refused.
        #[test]
        fn a_reward_is_exact_and_bounded_or_refused(
            amount in 0..=money::MAX_AMOUNT_MINOR,
            fixed in proptest::prelude::any::<i64>(),
            bps in proptest::prelude::any::<i32>(),
            cap in proptest::option::of(0..=money::MAX_AMOUNT_MINOR),
        ) {
            let max = i128::from(money::MAX_AMOUNT_MINOR);
            match Reward::Fixed(fixed).on(amount) {
                Some(v) => proptest::prop_assert_eq!(v, fixed),
                None => proptest::prop_assert!(fixed < 0 || i128::from(fixed) > max),
            }
            let exact = i128::from(amount) * i128::from(bps) / 10_000;
            match (Reward::Percent { bps, max_minor: cap }).on(amount) {
                Some(v) => {
                    proptest::prop_assert!((0..=max).contains(&i128::from(v)));
                    proptest::prop_assert_eq!(i128::from(v), cap.map_or(exact, |c| exact.min(i128::from(c))));
                }
                None => proptest::prop_assert!(exact < 0 || exact > max),
            }
        }
    }
}
