//! Webhook subscriptions and what the partner sees of their deliveries.
//!
//! Every catalog event a subscription wants becomes one delivery row when the outbox relay
//! moves the event (so only committed events are ever sent), with the exact body all its
//! attempts send. The `webhook_deliver` job signs and posts it; failures retry on a
//! published schedule as persisted jobs, then dead-letter. Per resource, a delivery waits
//! while an earlier event of the same resource to the same subscription is still pending.
pub mod event_feed;
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Duration, Utc};
use entities::webhook_subscription;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};
use sha2::Sha256;
use uuid::Uuid;

use crate::domain::credentials::{Principal, Scope};
use crate::{error::ApiError, infra::crypto::Sealer, store};

mod operator;
mod read_models;
pub mod target;

pub use operator::{operator_enable, operator_recover, recoverable};
pub use read_models::{Attempt, Delivery, Subscription};
pub use target::{PinnedResolver, check_url};

pub use entities::{webhook_delivery::DeliveryState, webhook_subscription::SubscriptionState};
pub const ACTIVE: SubscriptionState = SubscriptionState::Active;
pub const DISABLED: SubscriptionState = SubscriptionState::Disabled;

pub const PENDING: DeliveryState = DeliveryState::Pending;
pub const DELIVERED: DeliveryState = DeliveryState::Delivered;
pub const DEAD: DeliveryState = DeliveryState::Dead;
pub const SUSPENDED: DeliveryState = DeliveryState::Suspended;
/// The delivery states a list may filter on, as the contract spells them.
pub const DELIVERY_STATES: &[&str] = &["PENDING", "DELIVERED", "DEAD", "SUSPENDED"];

/// The catalog event types the service emits (the spec's catalog).
pub const EVENT_TYPES: &[&str] = &[
    "customer.identified",
    "customer.enrolled",
    "enrollment.pending_proof",
    "enrollment.verified",
    "enrollment.expired",
    "wallet.balance_changed",
    "topup.requested",
    "topup.confirmed",
    "topup.failed",
    "payment.completed",
    "payment.refunded",
    "payment.reversed",
    "promo_grant.accrued",
    "promo_grant.released",
    "promo_grant.expired",
    "promo_grant.clawed_back",
    "offer.armed",
    "offer.redeemed",
    "offer.expired",
    "transaction.settled",
    "transaction.disputed",
    "transaction.unattached",
    "report.ready",
    "report.failed",
    "risk.limit_reached",
];

// --- pure parts --------------------------------------------------------------------------

/// Whether a subscription (its filter and merchant) wants an event.
pub fn wants(
    event_types: Option<&Value>,
    sub_merchant: Option<Uuid>,
    event_type: &str,
    merchant: Uuid,
) -> bool {
    if sub_merchant.is_some_and(|m| m != merchant) {
        return false;
    }
    match event_types.and_then(Value::as_array) {
        Some(list) => list.iter().any(|t| t.as_str() == Some(event_type)),
        None => true,
    }
}

/// The delivered envelope, as the spec's "Event envelope" names it.
pub struct EventEnvelope<'a> {
    pub event_id: Uuid,
    pub event_type: &'a str,
    pub occurred_at: DateTime<Utc>,
    pub emitted_at: DateTime<Utc>,
    pub merchant_id: Uuid,
    pub data: &'a Value,
    pub sequence_number: i64,
}

impl EventEnvelope<'_> {
    pub fn body(&self) -> String {
        let ts = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        json!({
            "event_id": self.event_id.to_string(),
            "event_type": self.event_type,
            "occurred_at": ts(self.occurred_at),
            "emitted_at": ts(self.emitted_at),
            "merchant_id": self.merchant_id.to_string(),
            "data": self.data,
            "sequence_number": self.sequence_number,
        })
        .to_string()
    }
}

/// A fresh signing secret: `whsec_` and 32 random bytes, base64url.
pub fn new_secret() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("whsec_{}", URL_SAFE_NO_PAD.encode(b))
}

/// Lowercase hex HMAC-SHA256 of `<t>.<body>` under `secret`.
pub fn sign(secret: &str, t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    crate::infra::crypto::hex(&mac.finalize().into_bytes())
}

/// `Service-Signature: t=<unix>,v1=<hex>[,v1=<hex>]`: one `v1` per live secret (the new one
/// first, then the previous one during its grace period).
pub fn signature_header(secrets: &[String], t: i64, body: &str) -> String {
    let mut h = format!("t={t}");
    for s in secrets {
        h.push_str(",v1=");
        h.push_str(&sign(s, t, body));
    }
    h
}

// --- subscriptions -----------------------------------------------------------------------

fn secret_aad(id: Uuid) -> Vec<u8> {
    format!("webhook-secret:{id}").into_bytes()
}

/// The secrets that sign now: the current one, and the previous one during its grace.
pub fn live_secrets(
    sealer: &Sealer,
    s: &webhook_subscription::Model,
    now: DateTime<Utc>,
) -> Result<Vec<String>, ApiError> {
    let open = |sealed: &str| {
        sealer
            .open(sealed, &secret_aad(s.id))
            .map_err(|_| ApiError::internal("webhook secret could not be unsealed"))
            .and_then(|b| String::from_utf8(b).map_err(ApiError::internal))
    };
    let mut out = vec![open(&s.secret_sealed)?];
    if let (Some(prev), Some(until)) = (&s.previous_secret_sealed, s.previous_secret_until)
        && until > now
    {
        out.push(open(prev)?);
    }
    Ok(out)
}

/// Subscriptions are the control plane's: the platform key (every merchant of the
/// integration) or a merchant-wide key (its merchant's). A brand's or branch's key would
/// receive other branches' events, so it manages none.
pub fn control_plane(p: &Principal) -> Result<Option<Uuid>, ApiError> {
    match p.scope {
        Scope::Integration => Ok(None),
        Scope::Enterprise { enterprise_id } => Ok(Some(enterprise_id)),
        _ => Err(ApiError::forbidden(
            "Webhook subscriptions need a merchant-wide or platform key, not a brand or branch key.",
        )),
    }
}

/// Subscriptions are the integration's; a merchant's key sees only its merchant's ones.
fn visible(p: &Principal, s: &webhook_subscription::Model) -> bool {
    s.integration_id == p.integration_id
        && match control_plane(p) {
            Ok(None) => true,
            Ok(Some(m)) => s.merchant_id == Some(m),
            Err(_) => false,
        }
}

pub struct NewSubscription {
    pub url: String,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    /// The merchant whose events it gets; None (platform key only) for every merchant
    /// linked to the integration.
    pub merchant_id: Option<Uuid>,
}

/// A subscription and, at creation and rotation only, its new secret.
pub struct WithSecret {
    pub subscription: Subscription,
    pub secret: String,
}

pub async fn create<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    p: &Principal,
    n: NewSubscription,
    now: DateTime<Utc>,
) -> Result<WithSecret, ApiError> {
    if n.merchant_id.is_none() && control_plane(p)?.is_some() {
        return Err(ApiError::forbidden(
            "Only the platform key subscribes to every merchant of the integration.",
        ));
    }
    let id = Uuid::now_v7();
    let secret = new_secret();
    let s = webhook_subscription::Model {
        id,
        integration_id: p.integration_id,
        merchant_id: n.merchant_id,
        url: n.url,
        description: n.description,
        event_types: n.event_types.map(|t| json!(t)),
        secret_sealed: sealer.seal(secret.as_bytes(), &secret_aad(id)),
        previous_secret_sealed: None,
        previous_secret_until: None,
        state: ACTIVE,
        disabled_reason: None,
        disabled_at: None,
        failure_streak: 0,
        failing_since: None,
        is_sandbox: p.is_sandbox,
        created_at: now,
        updated_at: now,
    };
    store::webhooks::insert_subscription(c, s.clone()).await?;
    Ok(WithSecret {
        subscription: Subscription::at(s, now),
        secret,
    })
}

/// A page of the subscriptions the caller sees (`visible`), oldest first, as read at `now`.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    after: Option<Uuid>,
    limit: u64,
    now: DateTime<Utc>,
) -> Result<(Vec<Subscription>, bool), ApiError> {
    let merchant = control_plane(p)?;
    let rows = store::webhooks::subscriptions_page(c, p.integration_id, merchant, after, limit + 1)
        .await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    Ok((
        rows.into_iter().map(|s| Subscription::at(s, now)).collect(),
        more,
    ))
}

/// The caller's subscription, locked; another integration's (or merchant's) is NOT_FOUND.
pub async fn lock<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    id: Uuid,
) -> Result<webhook_subscription::Model, ApiError> {
    store::webhooks::lock_subscription(c, id)
        .await?
        .filter(|s| visible(p, s))
        .ok_or_else(|| ApiError::not_found("Subscription"))
}

pub async fn get<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    id: Uuid,
) -> Result<webhook_subscription::Model, ApiError> {
    store::webhooks::find_subscription(c, id)
        .await?
        .filter(|s| visible(p, s))
        .ok_or_else(|| ApiError::not_found("Subscription"))
}

/// Stops deliveries to the endpoint (`manual`). Events meanwhile are kept as SUSPENDED
/// deliveries that re-enabling can replay. Disabling a disabled one changes nothing.
pub async fn disable<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<Subscription, ApiError> {
    let mut s = lock(c, p, id).await?;
    if s.state == DISABLED {
        return Ok(Subscription::at(s, now));
    }
    s.state = DISABLED;
    s.disabled_reason = Some("manual".into());
    s.disabled_at = Some(now);
    s.updated_at = now;
    let s = store::webhooks::update_subscription(c, s).await?;
    Ok(Subscription::at(s, now))
}

/// Re-enables the endpoint. With `replay_missed`, deliveries suspended while it was
/// disabled go out again (in order per resource). Returns how many were missed and how
/// many are sent again.
pub async fn enable<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    id: Uuid,
    replay_missed: bool,
    now: DateTime<Utc>,
) -> Result<(Subscription, u64, u64), ApiError> {
    let s = lock(c, p, id).await?;
    let (s, missed, replayed) = enable_locked(c, s, replay_missed, now).await?;
    Ok((Subscription::at(s, now), missed, replayed))
}

pub(super) async fn enable_locked<C: ConnectionTrait>(
    c: &C,
    mut s: webhook_subscription::Model,
    replay_missed: bool,
    now: DateTime<Utc>,
) -> Result<(webhook_subscription::Model, u64, u64), ApiError> {
    s.state = ACTIVE;
    s.disabled_reason = None;
    s.disabled_at = None;
    s.failure_streak = 0;
    s.failing_since = None;
    s.updated_at = now;
    let s = store::webhooks::update_subscription(c, s).await?;
    let missed = store::webhooks::count_in_state(c, s.id, SUSPENDED).await?;
    let replayed = if replay_missed {
        requeue_all(c, s.id, SUSPENDED, None, now).await?
    } else {
        0
    };
    Ok((s, missed, replayed))
}

/// A new secret; the previous one keeps signing beside it for `grace`.
pub async fn rotate<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    p: &Principal,
    id: Uuid,
    grace: Duration,
    now: DateTime<Utc>,
) -> Result<WithSecret, ApiError> {
    let mut s = lock(c, p, id).await?;
    if let Some(until) = s.previous_secret_until.filter(|u| *u > now) {
        // Rotating again now would drop a secret receivers may still be using.
        return Err(ApiError::conflict(
            "The previous secret is still in its grace period; rotate again after it ends.",
        )
        .with_details(json!({
            "previous_secret_expires_at": until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        })));
    }
    let secret = new_secret();
    s.previous_secret_sealed = Some(s.secret_sealed.clone());
    s.previous_secret_until = Some(now + grace);
    s.secret_sealed = sealer.seal(secret.as_bytes(), &secret_aad(s.id));
    s.updated_at = now;
    let s = store::webhooks::update_subscription(c, s).await?;
    Ok(WithSecret {
        subscription: Subscription::at(s, now),
        secret,
    })
}

// --- delivery history --------------------------------------------------------------------

/// A page of a subscription's deliveries, each with every attempt.
pub struct DeliveryPage {
    pub deliveries: Vec<Delivery>,
    pub more: bool,
}

pub async fn deliveries<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    subscription: Uuid,
    event_type: Option<&str>,
    state: Option<&str>,
    after: Option<Uuid>,
    limit: u64,
) -> Result<DeliveryPage, ApiError> {
    let s = get(c, p, subscription).await?;
    let rows =
        store::webhooks::deliveries_page(c, s.id, event_type, state, after, limit + 1).await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    let ids: Vec<Uuid> = rows.iter().map(|d| d.id).collect();
    let mut attempts = store::webhooks::attempts_of(c, &ids).await?;
    let deliveries = rows
        .into_iter()
        .map(|d| {
            let mine: Vec<_> = attempts.extract_if(.., |a| a.delivery_id == d.id).collect();
            Delivery::of(d, mine)
        })
        .collect();
    Ok(DeliveryPage { deliveries, more })
}

/// Puts deliveries back to PENDING as a new series and asks for their jobs through the
/// outbox, in the caller's transaction.
async fn requeue_all<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    state: DeliveryState,
    since: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<u64, ApiError> {
    let rows = store::webhooks::requeue_in_state(c, subscription, state, since, now).await?;
    for d in &rows {
        crate::domain::outbox::job_requests::deliver_webhook(c, d).await?;
    }
    Ok(rows.len() as u64)
}

/// Sends one delivery again as a new series of attempts, whatever its state (a job of an
/// older series stops at its next look).
pub async fn redeliver<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    subscription: Uuid,
    delivery: Uuid,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let s = lock(c, p, subscription).await?;
    let d = store::webhooks::lock_delivery(c, delivery)
        .await?
        .filter(|d| d.subscription_id == s.id)
        .ok_or_else(|| ApiError::not_found("Delivery"))?;
    let d = store::webhooks::requeue(c, d, now).await?;
    crate::domain::outbox::job_requests::deliver_webhook(c, &d).await?;
    Ok(())
}

/// Sends again every delivery that failed for good (DEAD) or was suspended, created at or
/// after `since`. Returns how many.
pub async fn redeliver_failed<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    subscription: Uuid,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<u64, ApiError> {
    let s = lock(c, p, subscription).await?;
    recover_locked(c, s.id, since, now).await
}

pub(super) async fn recover_locked<C: ConnectionTrait>(
    c: &C,
    subscription: Uuid,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<u64, ApiError> {
    Ok(requeue_all(c, subscription, DEAD, Some(since), now).await?
        + requeue_all(c, subscription, SUSPENDED, Some(since), now).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hex_hmac_sha256_of_timestamp_dot_body() {
        // Reference value computed independently (openssl dgst -sha256 -hmac).
        let body = r#"{"a":1}"#;
        let h = signature_header(&["whsec_test".into()], 1_700_000_000, body);
        assert!(h.starts_with("t=1700000000,v1="), "{h}");
        assert_eq!(h.matches("v1=").count(), 1);
        assert_eq!(sign("whsec_test", 1_700_000_000, body).len(), 64);
        let two = signature_header(&["a".into(), "b".into()], 1, body);
        assert_eq!(two.matches("v1=").count(), 2);
    }

    #[test]
    fn a_filter_and_a_merchant_binding_decide_what_a_subscription_gets() {
        let m = Uuid::now_v7();
        let other = Uuid::now_v7();
        assert!(wants(None, None, "payment.completed", m));
        let only = json!(["payment.completed"]);
        assert!(wants(Some(&only), None, "payment.completed", m));
        assert!(!wants(Some(&only), None, "payment.refunded", m));
        assert!(!wants(None, Some(other), "payment.completed", m));
    }
}
