//! Job `webhook_deliver`: posts one delivery's body to its subscription's endpoint, signed
//! with every live secret, and records the attempt. A non-2xx answer or a timeout is
//! retried on the webhook schedule (each retry a persisted job with its run-after time),
//! and after the last attempt the delivery is DEAD and the job dead-lettered, where
//! `dlq replay` (or a partner's redelivery) sends it again.
use std::time::{Duration, Instant};

use chrono::Utc;
use entities::{webhook_attempt, webhook_delivery};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::{JobEnvelope, JobError, backoff, runtime::JobDeps};
use crate::{
    domain::webhooks::{self, DEAD, DELIVERED, DISABLED, PENDING, SUSPENDED},
    store,
};

pub const JOB_TYPE: &str = "webhook_deliver";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Payload {
    pub delivery_id: Uuid,
}

/// A fresh job for a delivery (first send, redelivery, replay of missed events).
pub fn envelope(d: &webhook_delivery::Model) -> JobEnvelope {
    JobEnvelope::first(
        Uuid::now_v7(),
        JOB_TYPE,
        Some(d.merchant_id),
        json!(Payload { delivery_id: d.id }),
        Utc::now(),
    )
}

fn retryable(e: sea_orm::DbErr) -> JobError {
    JobError::Retryable(format!("database: {e}"))
}

/// How long a delivery waits for an earlier event of its resource: doubling from 1 s, at
/// most a minute between looks.
fn deferral(env: &JobEnvelope) -> Duration {
    Duration::from_secs(1u64 << env.deferrals.min(6))
}

pub async fn run(deps: &JobDeps, env: &JobEnvelope) -> Result<(), JobError> {
    let st = &deps.state;
    let cfg = &st.config;
    let p: Payload = serde_json::from_value(env.payload.clone())
        .map_err(|e| JobError::Permanent(format!("undecodable webhook payload: {e}")))?;
    let Some(d) = store::webhooks::find_delivery(&st.db, p.delivery_id)
        .await
        .map_err(retryable)?
    else {
        return Err(JobError::Permanent("the delivery no longer exists".into()));
    };
    // Delivered already (a job run twice) or set aside: nothing to send.
    if d.state == DELIVERED || d.state == SUSPENDED {
        return Ok(());
    }
    let Some(sub) = store::webhooks::find_subscription(&st.db, d.subscription_id)
        .await
        .map_err(retryable)?
    else {
        return Err(JobError::Permanent(
            "the subscription no longer exists".into(),
        ));
    };
    if sub.state == DISABLED {
        set_state(deps, d, SUSPENDED).await?;
        return Ok(());
    }
    if d.state == PENDING
        && store::webhooks::earlier_pending(&st.db, &d)
            .await
            .map_err(retryable)?
    {
        return Err(JobError::Deferred(deferral(env)));
    }
    let now = Utc::now();
    let secrets = webhooks::live_secrets(&st.sealer, &sub, now)
        .map_err(|e| JobError::Permanent(e.to_string()))?;
    let t = now.timestamp();
    let started = Instant::now();
    let sent = deps
        .http
        .post(&sub.url)
        .header("content-type", "application/json")
        .header(
            "Service-Signature",
            webhooks::signature_header(&secrets, t, &d.body),
        )
        .header("Service-Event-Id", d.event_id.to_string())
        .header("Service-Event-Type", d.event_type.as_str())
        .header("Service-Delivery-Id", d.id.to_string())
        .body(d.body.clone())
        .send()
        .await;
    let latency_ms = started.elapsed().as_millis() as i64;
    let (status, error) = match sent {
        Ok(r) if r.status().is_success() => (Some(i32::from(r.status().as_u16())), None),
        Ok(r) => (
            Some(i32::from(r.status().as_u16())),
            Some(format!("HTTP {}", r.status().as_u16())),
        ),
        Err(e) if e.is_timeout() => (None, Some("timed out".to_string())),
        Err(e) if e.is_connect() => (None, Some("could not connect".to_string())),
        Err(_) => (None, Some("request failed".to_string())),
    };
    let last = env.attempt >= cfg.webhook_max_attempts;
    let wait = (error.is_some() && !last).then(|| {
        backoff::delay_before_attempt(
            env.attempt + 1,
            Duration::from_millis(cfg.webhook_backoff_base_ms),
            Duration::from_millis(cfg.webhook_backoff_max_ms),
        )
    });
    let next_retry_at = wait.map(|w| now + chrono::Duration::from_std(w).unwrap_or_default());
    let outcome = record(
        deps,
        d,
        webhook_attempt::Model {
            id: Uuid::now_v7(),
            delivery_id: p.delivery_id,
            subscription_id: sub.id,
            attempt: 0,
            started_at: now,
            status_code: status,
            latency_ms,
            error: error.clone(),
            succeeded: error.is_none(),
            next_retry_at,
        },
        last,
    )
    .await?;
    metrics::histogram!("webhook_delivery_latency_seconds").record(latency_ms as f64 / 1000.0);
    match (error, outcome) {
        (None, _) => Ok(()),
        // The endpoint was disabled by this failure: the delivery waits for re-enabling.
        (Some(_), Recorded::Suspended) => Ok(()),
        (Some(e), _) if last => Err(JobError::Permanent(format!(
            "{e} after {} attempts",
            env.attempt
        ))),
        (Some(e), _) => Err(JobError::RetryAfter(e, wait.unwrap_or_default())),
    }
}

enum Recorded {
    Done,
    Suspended,
}

/// The attempt, the delivery's new state and the endpoint's failure streak, in one
/// transaction; a streak past the published threshold disables the endpoint.
async fn record(
    deps: &JobDeps,
    mut d: webhook_delivery::Model,
    mut a: webhook_attempt::Model,
    last: bool,
) -> Result<Recorded, JobError> {
    let st = &deps.state;
    let cfg = &st.config;
    let now = a.started_at;
    let txn = store::begin(&st.db).await.map_err(retryable)?;
    d.attempts += 1;
    a.attempt = d.attempts;
    d.last_status_code = a.status_code;
    d.last_error = a.error.clone();
    d.next_attempt_at = a.next_retry_at;
    d.updated_at = Utc::now();
    let mut outcome = Recorded::Done;
    if a.succeeded {
        d.state = DELIVERED.into();
        d.delivered_at = Some(now);
        store::webhooks::note_success(&txn, d.subscription_id)
            .await
            .map_err(retryable)?;
    } else {
        let sub = store::webhooks::note_failure(&txn, d.subscription_id, now)
            .await
            .map_err(retryable)?;
        let failing = sub.is_some_and(|s| {
            s.failure_streak as u32 >= cfg.webhook_disable_after_failures
                && s.failing_since.is_some_and(|f| {
                    (now - f).num_seconds() >= cfg.webhook_disable_after_secs as i64
                })
        });
        if failing
            && store::webhooks::disable_failing(&txn, d.subscription_id, now)
                .await
                .map_err(retryable)?
        {
            tracing::warn!(subscription = %d.subscription_id, "webhook endpoint disabled after sustained failure");
            metrics::counter!("webhook_endpoints_disabled_total").increment(1);
        }
        if failing {
            d.state = SUSPENDED.into();
            d.next_attempt_at = None;
            a.next_retry_at = None;
            outcome = Recorded::Suspended;
        } else if last {
            d.state = DEAD.into();
            d.next_attempt_at = None;
        }
    }
    store::webhooks::insert_attempt(&txn, a)
        .await
        .map_err(retryable)?;
    store::webhooks::update_delivery(&txn, d)
        .await
        .map_err(retryable)?;
    txn.commit().await.map_err(retryable)?;
    Ok(outcome)
}

async fn set_state(
    deps: &JobDeps,
    mut d: webhook_delivery::Model,
    state: &str,
) -> Result<(), JobError> {
    d.state = state.into();
    d.next_attempt_at = None;
    d.updated_at = Utc::now();
    store::webhooks::update_delivery(&deps.state.db, d)
        .await
        .map_err(retryable)?;
    Ok(())
}
