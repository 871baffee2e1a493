//! Promotional grants after they accrue: listing a customer's grants, operators clawing
//! back a grant's unspent remainder, and expiry. Each ending posts through the ledger (the
//! remainder goes to the merchant's forfeit account) under the wallet's lock, so it runs
//! once however many workers or operators try at the same moment.
use crate::store::Db;
use chrono::{DateTime, Utc};
use entities::{promo_grant, promo_grant::PromoGrantState};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::{
    customers::wallets::{self, Balance},
    ledger,
    operators::{self, Operator},
    outbox::events::{NewOutbox, OutboxKind},
};
use crate::{error::ApiError, store};

pub const STATES: &[&str] = &["LOCKED", "RELEASED", "CONSUMED", "EXPIRED", "CLAWED_BACK"];

/// A promotional grant as partners read it: the domain's read model, so the HTTP edge names
/// no table.
#[derive(Clone, Debug)]
pub struct Grant {
    pub id: Uuid,
    pub wallet_id: Uuid,
    /// What issued it: CASHBACK, an offer's reward, a top-up bonus, an adjustment ...
    pub source: String,
    pub state: PromoGrantState,
    pub currency: String,
    pub original_minor: i64,
    pub remaining_minor: i64,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl From<promo_grant::Model> for Grant {
    fn from(g: promo_grant::Model) -> Self {
        Grant {
            id: g.id,
            wallet_id: g.wallet_id,
            source: g.source,
            state: g.state,
            currency: g.currency,
            original_minor: g.original_minor,
            remaining_minor: g.remaining_minor,
            expires_at: g.expires_at,
            created_at: g.created_at,
        }
    }
}

/// A page of the identity's grants (all its wallets), newest first.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    wallet_user_id: Uuid,
    state: Option<&str>,
    source: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<Grant>, bool), ApiError> {
    store::customers::wallets::find_identity(c, merchant, wallet_user_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Customer"))?;
    let wallets: Vec<Uuid> = store::customers::wallets::wallets_of_identity(c, wallet_user_id)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect();
    let rows = store::customers::wallets::grants_page(c, &wallets, state, source, after, limit + 1)
        .await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    Ok((rows.into_iter().map(Grant::from).collect(), more))
}

fn grant_event(
    topic: &str,
    g: &promo_grant::Model,
    amount: i64,
    reason: &str,
    now: DateTime<Utc>,
) -> NewOutbox {
    NewOutbox {
        kind: OutboxKind::Event,
        topic: topic.into(),
        merchant_id: Some(g.merchant_id),
        resource_type: "promo_grant".into(),
        resource_id: g.id.to_string(),
        payload: json!({
            "grant_id": g.id.to_string(),
            "wallet_id": g.wallet_id.to_string(),
            "source": g.source,
            "amount_minor": amount,
            "currency": g.currency,
            "reason": reason,
        }),
        occurred_at: now,
    }
}

/// Ends one grant: its remainder leaves through `posting` and it moves to `to`. The caller
/// holds the wallet locked and has checked the grant is live. Returns the amount removed.
async fn end<C: ConnectionTrait>(
    c: &C,
    g: &promo_grant::Model,
    to: PromoGrantState,
    posting: ledger::Posting,
    reference: &str,
    now: DateTime<Utc>,
) -> Result<i64, ApiError> {
    let amount = g.remaining_minor;
    if amount > 0 {
        store::ledger::post(
            c,
            &posting,
            store::ledger::Reference {
                kind: reference,
                id: g.id,
                memo: None,
                at: now,
            },
        )
        .await?;
    }
    if !store::customers::wallets::end_grant(c, g.id, to, now).await? {
        return Err(ApiError::internal("grant changed under the wallet lock"));
    }
    Ok(amount)
}

/// Ends a live grant (the caller holds its wallet locked) as CLAWED_BACK: its remainder
/// goes back to the merchant. Returns the amount.
async fn claw<C: ConnectionTrait>(
    c: &C,
    g: &promo_grant::Model,
    now: DateTime<Utc>,
) -> Result<i64, ApiError> {
    let posting =
        ledger::posting::clawback(g.merchant_id, g.into(), &g.currency, g.remaining_minor);
    end(c, g, PromoGrantState::ClawedBack, posting, "clawback", now).await
}

/// Takes back the bonus grant of a top-up whose credit is taken back (the caller holds its
/// wallet locked): what is left of it goes back to the merchant's promotional funding, as a
/// reward reversal, and the grant ends CLAWED_BACK, also when it was spent in full, so that
/// a later refund of a payment it paid forfeits that part instead of reviving the grant. A
/// grant that expired or was clawed back already gives back nothing. Returns the amount
/// and promo_grant.clawed_back (none when the grant had already ended).
pub async fn take_back_bonus<C: ConnectionTrait>(
    c: &C,
    grant_id: Uuid,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<(i64, Option<NewOutbox>), ApiError> {
    let Some(g) = store::customers::wallets::find_grant(c, grant_id).await? else {
        return Ok((0, None));
    };
    if !matches!(
        g.state,
        PromoGrantState::Released | PromoGrantState::Locked | PromoGrantState::Consumed
    ) {
        return Ok((0, None));
    }
    let posting = ledger::posting::reward_reversal(
        g.merchant_id,
        (&g).into(),
        &g.currency,
        g.remaining_minor,
    );
    let amount = end(
        c,
        &g,
        PromoGrantState::ClawedBack,
        posting,
        "reward_reversal",
        now,
    )
    .await?;
    let event = grant_event("promo_grant.clawed_back", &g, amount, reason, now);
    Ok((amount, Some(event)))
}

#[derive(Clone, Debug)]
pub struct ClawedBack {
    pub grant: Grant,
    pub clawed_back_minor: i64,
    pub balance_after: Balance,
}

/// Operators: removes the unspent remainder of a grant (never actual money), with
/// promo_grant.clawed_back and an audit entry. A grant already clawed back is returned
/// unchanged; one that has ended otherwise (spent, expired) has nothing to claw back.
pub async fn clawback<C: ConnectionTrait>(
    c: &C,
    op: &Operator,
    grant_id: Uuid,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<ClawedBack, ApiError> {
    let found = store::customers::wallets::find_grant(c, grant_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Grant"))?;
    // `now` is real time; a sandbox merchant's ledger runs on its test clock.
    let now = crate::domain::sandbox::test_clock::merchant_clock(c, found.merchant_id)
        .await?
        .at(now);
    let w = store::customers::wallets::lock_wallet(c, found.merchant_id, found.wallet_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Grant"))?;
    let g = store::customers::wallets::find_grant(c, grant_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Grant"))?;
    let clawed = match g.state {
        PromoGrantState::ClawedBack => None,
        PromoGrantState::Released | PromoGrantState::Locked => {
            let amount = claw(c, &g, now).await?;
            operators::audit(
                c,
                &op.actor(),
                "grant.clawback",
                "promo_grant",
                Some(g.id.to_string()),
                Some(reason.to_string()),
                json!({"merchant_id": g.merchant_id.to_string(), "wallet_id": g.wallet_id.to_string(), "clawed_back_minor": amount, "currency": g.currency, "from_state": g.state.as_str()}),
            )
            .await?;
            Some(amount)
        }
        other => {
            return Err(ApiError::field(
                "path:id",
                "nothing_to_claw_back",
                format!("the grant is {other}: it has no unspent remainder"),
            ));
        }
    };
    // Ending a grant never moves actual money, so the wallet row locked above is still
    // current: the balance is read once, for the event and the answer.
    let balance_after = wallets::current_balance(c, &w, now).await?;
    let (grant, clawed_back_minor) = match clawed {
        None => (g, 0),
        Some(amount) => {
            store::outbox::append_all(
                c,
                vec![
                    grant_event("promo_grant.clawed_back", &g, amount, reason, now),
                    wallets::balance_changed(&w, &balance_after, "clawback", g.id, now),
                ],
            )
            .await?;
            let ended = promo_grant::Model {
                state: PromoGrantState::ClawedBack,
                remaining_minor: 0,
                updated_at: now,
                ..g
            };
            (ended, amount)
        }
    };
    Ok(ClawedBack {
        grant: grant.into(),
        clawed_back_minor,
        balance_after,
    })
}

/// Expires every live grant past its `expires_at`, one wallet transaction each: the
/// remainder goes to the merchant's forfeit account (promo_grant.expired). Safe to run
/// twice or on several workers at once: each re-reads the grant under the wallet's lock.
/// Returns how many grants it expired.
pub async fn expire_due(
    db: &Db,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
) -> Result<usize, ApiError> {
    let mut expired = 0;
    loop {
        let due = store::customers::wallets::due_grants(db, now, merchants, 200).await?;
        let batch = due.len();
        let mut progressed = false;
        for found in due {
            let txn = store::begin(db).await?;
            let Some(w) =
                store::customers::wallets::lock_wallet(&txn, found.merchant_id, found.wallet_id)
                    .await?
            else {
                continue;
            };
            let Some(g) = store::customers::wallets::find_grant(&txn, found.id).await? else {
                continue;
            };
            if !matches!(g.state, PromoGrantState::Released | PromoGrantState::Locked)
                || g.expires_at > now
            {
                continue;
            }
            let amount = end(
                &txn,
                &g,
                PromoGrantState::Expired,
                ledger::posting::grant_expiry(
                    g.merchant_id,
                    (&g).into(),
                    &g.currency,
                    g.remaining_minor,
                ),
                "grant_expiry",
                now,
            )
            .await?;
            let mut events = vec![grant_event(
                "promo_grant.expired",
                &g,
                amount,
                "expired",
                now,
            )];
            if amount > 0 {
                // Expiry moves no actual money: the locked wallet row is still current.
                let after = wallets::current_balance(&txn, &w, now).await?;
                events.push(wallets::balance_changed(
                    &w,
                    &after,
                    "grant_expiry",
                    g.id,
                    now,
                ));
            }
            store::outbox::append_all(&txn, events).await?;
            txn.commit().await?;
            expired += 1;
            progressed = true;
        }
        if batch < 200 || !progressed {
            return Ok(expired);
        }
    }
}
