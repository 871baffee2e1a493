//! Lapsing: an identity whose pending-proof window ends unproved expires, and its actual
//! money moves into the merchant's escrow for each wallet until the customer verifies.
use crate::store::Db;
use chrono::{DateTime, Utc};
use entities::{enrollment, enrollment::EnrollmentStatus, wallet, wallet_user};
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::customers::proof_window::event;

use crate::{
    domain::{
        customers::EXPIRED,
        customers::wallets::{self, PENDING_PROOF},
        ledger,
        outbox::events::NewOutbox,
    },
    error::ApiError,
    store,
};

// ---------------------------------------------------------------------------------------
// Expiry

/// The identity's window lapsed: it becomes EXPIRED, its actual money moves into the
/// merchant's escrow for each wallet, and `enrollment.expired` is written to `events`. The
/// caller holds the identity locked.
pub(super) async fn lapse<C: ConnectionTrait>(
    c: &C,
    identity: &wallet_user::Model,
    mut e: enrollment::Model,
    now: DateTime<Utc>,
    events: &mut Vec<NewOutbox>,
) -> Result<(), ApiError> {
    e.status = EnrollmentStatus::Expired;
    e.expired_at = Some(now);
    e.updated_at = now;
    store::customers::enrollments::update(c, e.clone()).await?;
    if identity.state != PENDING_PROOF {
        return Ok(());
    }
    store::customers::enrollments::set_identity_state(c, identity.id, EXPIRED, None, now).await?;
    let mut escrowed = 0;
    let mut locked_promo = 0;
    let mut currency = None;
    for found in store::customers::wallets::wallets_of_identity(c, identity.id).await? {
        let w = store::customers::wallets::lock_wallet(c, identity.merchant_id, found.id)
            .await?
            .ok_or_else(|| ApiError::not_found("Wallet"))?;
        currency.get_or_insert(w.currency.clone());
        let held = w.actual_minor;
        if held > 0 {
            store::ledger::post(
                c,
                &ledger::posting::escrow_hold(w.merchant_id, w.id, &w.currency, held),
                store::ledger::Reference {
                    kind: "enrollment",
                    id: e.id,
                    memo: Some("pending-proof window lapsed".into()),
                    at: now,
                },
            )
            .await?;
        }
        // The hold took all of the actual money; the grants did not move.
        let w = wallet::Model {
            actual_minor: 0,
            ..w
        };
        let balance = wallets::current_balance(c, &w, now).await?;
        locked_promo += balance.promo_locked_minor;
        if held > 0 {
            escrowed += held;
            events.push(wallets::balance_changed(
                &w,
                &balance,
                "enrollment_expired",
                e.id,
                now,
            ));
        }
    }
    events.push(event(
        "enrollment.expired",
        identity,
        json!({
            "wallet_user_id": identity.id.to_string(),
            "enrollment_id": e.id.to_string(),
            "escrowed_actual_minor": escrowed,
            "locked_promo_minor": locked_promo,
            "currency": currency,
        }),
        now,
    ));
    Ok(())
}

/// Lapses every pending window past its deadline, one transaction each. Safe on several
/// workers at once: each one takes the identity's lock and re-reads the enrollment, so a
/// window lapses once. Returns how many lapsed.
pub async fn expire_due(
    db: &Db,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
) -> Result<usize, ApiError> {
    let mut lapsed = 0;
    loop {
        let due = store::customers::enrollments::due(db, now, merchants, 100).await?;
        if due.is_empty() {
            return Ok(lapsed);
        }
        let batch = due.len();
        let before = lapsed;
        for found in due {
            let txn = store::begin(db).await?;
            let Some(identity) = store::customers::wallets::lock_identity(
                &txn,
                found.merchant_id,
                found.wallet_user_id,
            )
            .await?
            else {
                continue;
            };
            let Some(e) = store::customers::enrollments::lock(&txn, found.id).await? else {
                continue;
            };
            if e.status != EnrollmentStatus::Pending || e.expires_at > now {
                continue;
            }
            let mut events = Vec::new();
            lapse(&txn, &identity, e, now, &mut events).await?;
            store::outbox::append_all(&txn, events).await?;
            txn.commit().await?;
            lapsed += 1;
        }
        if batch < 100 || lapsed == before {
            return Ok(lapsed);
        }
    }
}
