//! Job `webhook_deliver`: posts one delivery's body to its subscription's endpoint, signed
//! with every live secret, and records the attempt. A non-2xx answer or a timeout is
//! retried on the webhook schedule (each retry a persisted job with its run-after time),
//! and after the last attempt the delivery is DEAD and the job dead-lettered, where
//! `dlq replay` (or a partner's redelivery) sends it again.
//!
//! Each send of a delivery belongs to a series (`replays`): a redelivery or a dead-letter
//! replay starts a new one, and a job of an older series stops at its next look instead of
//! sending beside it.
use std::time::{Duration, Instant};

use chrono::Utc;
use entities::{webhook_attempt, webhook_delivery, webhook_subscription};
use sea_orm::DbErr;
use uuid::Uuid;

use super::{JobError, QueuedJob, backoff, context::JobDeps};
use crate::{
    domain::{
        outbox::job_requests::{WEBHOOK_BATCH, deliver_webhook},
        webhooks::{self, DEAD, DELIVERED, DISABLED, PENDING, SUSPENDED},
    },
    infra::telemetry::{metrics as m, trace},
    store,
};
use tracing::Instrument;

pub use crate::domain::outbox::job_requests::{
    DeliveryPayload as Payload, WEBHOOK_DELIVER as JOB_TYPE,
};

pub(super) fn retryable(e: DbErr) -> JobError {
    JobError::Retryable(format!("database: {e}"))
}

/// How long a delivery waits for an earlier event of its resource before looking again:
/// doubling from 1 s to at most 10 s, with up to a second of jitter so waiters spread out.
pub(super) fn deferral(env: &QueuedJob) -> Duration {
    let base = Duration::from_secs((1u64 << env.deferrals.min(4)).min(10));
    base + Duration::from_millis(rand::random_range(0..1_000))
}

/// The delivery to send for this job with its subscription, or None when there is nothing
/// to send: delivered, suspended, or superseded by a newer series. A DEAD delivery (a
/// dead-letter replay) is claimed as a new series.
async fn current(
    deps: &JobDeps,
    p: &Payload,
) -> Result<Option<(webhook_delivery::Model, webhook_subscription::Model)>, JobError> {
    let st = &deps.state;
    let Some((d, sub)) = store::webhooks::find_delivery_with_subscription(&st.db, p.delivery_id)
        .await
        .map_err(retryable)?
    else {
        return Err(JobError::Permanent("the delivery no longer exists".into()));
    };
    let Some(sub) = sub else {
        return Err(JobError::Permanent(
            "the subscription no longer exists".into(),
        ));
    };
    match d.state {
        DELIVERED | SUSPENDED => Ok(None),
        DEAD => {
            let txn = store::begin(&st.db).await.map_err(retryable)?;
            let Some(mut d) = store::webhooks::lock_delivery(&txn, p.delivery_id)
                .await
                .map_err(retryable)?
                .filter(|d| d.state == DEAD)
            else {
                return Ok(None);
            };
            d.state = PENDING;
            d.replays += 1;
            d.updated_at = Utc::now();
            let d = store::webhooks::update_delivery(&txn, d)
                .await
                .map_err(retryable)?;
            txn.commit().await.map_err(retryable)?;
            Ok(Some((d, sub)))
        }
        _ if d.replays != p.series => Ok(None),
        _ => Ok(Some((d, sub))),
    }
}

pub async fn run(deps: &JobDeps, env: &QueuedJob) -> Result<(), JobError> {
    let st = &deps.state;
    let p: Payload = serde_json::from_value(env.payload.clone())
        .map_err(|e| JobError::Permanent(format!("undecodable webhook payload: {e}")))?;
    let Some((d, sub)) = current(deps, &p).await? else {
        return Ok(());
    };
    if sub.state == DISABLED {
        suspend(deps, &d).await?;
        return Ok(());
    }
    // A resource's first event (sequence numbers start at 1) has nothing to wait for.
    if d.sequence_number > 1
        && store::webhooks::earlier_pending(&st.db, &d)
            .await
            .map_err(retryable)?
    {
        return Err(JobError::Deferred(deferral(env)));
    }
    let secrets = webhooks::live_secrets(&st.sealer, &sub, Utc::now())
        .map_err(|e| JobError::Permanent(e.to_string()))?;
    // The target is checked again at each send: a name may resolve elsewhere by now.
    let allowed = allowed_target(deps, &sub).await;
    let sent = send(
        deps,
        &Target::of(&sub),
        &secrets,
        allowed.as_ref().err(),
        &d,
    )
    .await;
    let delivered = sent.error.is_none();
    let concluded = conclude(deps, env.attempt, &d, &sub, sent).await;
    if delivered && concluded.is_ok() {
        wake_next(deps, &d).await;
    }
    concluded
}

/// `d` is settled (delivered or dead): the next event of its resource, if it is waiting
/// for `d`, goes now rather than at its next look. Without this a resource's events that
/// queued up behind one slow delivery (a worker killed mid-send) went one per look, up
/// to ten seconds apart: a chain of 161 took six minutes to drain.
pub(super) async fn wake_next(deps: &JobDeps, d: &webhook_delivery::Model) {
    wake_next_of(deps, d.subscription_id, &[d]).await;
}

/// `wake_next` for each of `settled`, deliveries of one subscription, with one look for
/// them all. A wake that fails to be written only costs that wait.
pub(super) async fn wake_next_of(
    deps: &JobDeps,
    subscription: Uuid,
    settled: &[&webhook_delivery::Model],
) {
    let st = &deps.state;
    let ends: Vec<(&str, i64)> = settled
        .iter()
        .map(|d| (d.resource_key.as_str(), d.sequence_number))
        .collect();
    let woken = async {
        let next = store::webhooks::next_pending_after_each(&st.db, subscription, &ends)
            .await
            .map_err(|e| e.to_string())?;
        for id in next {
            // Waiting as a single delivery, or in a batch's chain (both carry its id).
            for queue in [JOB_TYPE, WEBHOOK_BATCH] {
                run_now(deps, queue, id).await?;
            }
        }
        Ok::<(), String>(())
    }
    .await;
    if let Err(e) = woken {
        tracing::warn!(subscription = %subscription, error = %e, "waking the next deliveries of resources failed");
    }
}

/// Moves the deferred jobs of `queue` that carry delivery `id` to now.
pub(super) async fn run_now(deps: &JobDeps, queue: &str, id: Uuid) -> Result<(), String> {
    deps.state
        .queue
        .run_deferred_now(queue, &format!("\"{id}\""))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `later`, just deferred, runs now if no earlier event of its delivery's resource is
/// pending any more (see `retry::settle_failure`).
pub(super) async fn wake_if_unblocked(deps: &JobDeps, later: &QueuedJob) {
    let Ok(p) = serde_json::from_value::<Payload>(later.payload.clone()) else {
        return;
    };
    let st = &deps.state;
    let woken = async {
        let Some(d) = store::webhooks::deliveries_by_ids(&st.db, &[p.delivery_id])
            .await
            .map_err(|e| e.to_string())?
            .pop()
        else {
            return Ok(());
        };
        if store::webhooks::earlier_pending(&st.db, &d)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(());
        }
        run_now(deps, JOB_TYPE, d.id).await
    }
    .await;
    if let Err(e) = woken {
        tracing::warn!(delivery = %p.delivery_id, error = %e, "looking again at a deferred delivery failed");
    }
}

/// Whether the subscription's endpoint may be sent to now; the error is what the history
/// shows when it may not.
pub(super) async fn allowed_target(
    deps: &JobDeps,
    sub: &webhook_subscription::Model,
) -> Result<(), String> {
    webhooks::check_url(
        &sub.url,
        sub.is_sandbox,
        deps.state.config.webhook_allow_private_targets,
    )
    .await
    .map_err(|_| "the endpoint's address is not allowed".to_string())
}

/// One send of a delivery and what came of it.
pub(super) struct Sent {
    pub started_at: chrono::DateTime<Utc>,
    pub status: Option<i32>,
    pub error: Option<String>,
    pub latency_ms: i64,
}

/// A subscription as its sends need it: the endpoint's address parsed once for all the
/// deliveries sent to it together (None if it does not parse: the send then fails as
/// reqwest fails it).
pub(super) struct Target<'a> {
    pub subscription: &'a webhook_subscription::Model,
    pub url: Option<reqwest::Url>,
}

impl<'a> Target<'a> {
    pub fn of(subscription: &'a webhook_subscription::Model) -> Self {
        Target {
            subscription,
            url: reqwest::Url::parse(&subscription.url).ok(),
        }
    }
}

/// POSTs the delivery's body, signed with every live secret; `refused` (the target check's
/// error) fails the attempt without a request. Holds one of the process's in-flight slots
/// (`WALLET_WEBHOOK_CONCURRENCY`) while the request runs.
pub(super) async fn send(
    deps: &JobDeps,
    target: &Target<'_>,
    secrets: &[String],
    refused: Option<&String>,
    d: &webhook_delivery::Model,
) -> Sent {
    let _slot = deps.webhook_slots.acquire().await;
    let now = Utc::now();
    let started = Instant::now();
    // The delivery continues the trace of the request whose event it carries, and the
    // receiver gets that trace in its `traceparent`.
    let span = tracing::info_span!(
        "webhook_delivery",
        delivery_id = %d.id,
        request_id = d.request_id.as_deref().unwrap_or_default(),
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
    );
    if trace::enabled() {
        span.record("otel.name", "webhook delivery");
        span.record("otel.kind", "client");
    }
    trace::continue_trace_unless_inside(&span, d.traceparent.as_deref());
    let traceparent = trace::traceparent(&span, d.traceparent.as_deref());
    let (status, error, outcome) = match refused {
        Some(e) => (None, Some(e.clone()), "refused"),
        None => {
            let request = match &target.url {
                Some(url) => deps.http.post(url.clone()),
                None => deps.http.post(&target.subscription.url),
            };
            let mut request = request
                .header("content-type", "application/json")
                .header(
                    "Service-Signature",
                    webhooks::signature_header(secrets, now.timestamp(), &d.body),
                )
                .header("Service-Event-Id", d.event_id.to_string())
                .header("Service-Event-Type", d.event_type.as_str())
                .header("Service-Delivery-Id", d.id.to_string());
            if let Some(tp) = &traceparent {
                request = request.header("traceparent", tp);
            }
            let sent = request
                .body(d.body.clone())
                .send()
                .instrument(span.clone())
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    (Some(i32::from(r.status().as_u16())), None, "success")
                }
                Ok(r) => (
                    Some(i32::from(r.status().as_u16())),
                    Some(format!("HTTP {}", r.status().as_u16())),
                    "http_error",
                ),
                Err(e) if e.is_timeout() => (None, Some("timed out".to_string()), "timeout"),
                Err(e) if e.is_connect() => {
                    (None, Some("could not connect".to_string()), "connect_error")
                }
                Err(_) => (None, Some("request failed".to_string()), "error"),
            }
        }
    };
    let elapsed = started.elapsed();
    let latency_ms = elapsed.as_millis() as i64;
    // The endpoint's health before this attempt: whether a failure streak was running.
    let health = if target.subscription.failure_streak > 0 {
        "failing"
    } else {
        "healthy"
    };
    metrics::counter!(m::WEBHOOK_ATTEMPTS, "outcome" => outcome, "endpoint_health" => health)
        .increment(1);
    metrics::histogram!(m::WEBHOOK_DURATION, "outcome" => outcome, "endpoint_health" => health)
        .record(elapsed.as_secs_f64());
    Sent {
        started_at: now,
        status,
        error,
        latency_ms,
    }
}

/// The attempt as the history keeps it (its number is set when it is recorded).
pub(super) fn attempt_of(
    d: &webhook_delivery::Model,
    sent: &Sent,
    next_retry_at: Option<chrono::DateTime<Utc>>,
) -> webhook_attempt::Model {
    webhook_attempt::Model {
        id: Uuid::now_v7(),
        delivery_id: d.id,
        subscription_id: d.subscription_id,
        attempt: 0,
        started_at: sent.started_at,
        status_code: sent.status,
        latency_ms: sent.latency_ms,
        error: sent.error.clone(),
        succeeded: sent.error.is_none(),
        next_retry_at,
    }
}

/// Records attempt number `attempt` of the delivery (its current series) and says what
/// the job does next: nothing more, retry after the schedule's wait, or dead-letter.
pub(super) async fn conclude(
    deps: &JobDeps,
    attempt: u32,
    d: &webhook_delivery::Model,
    sub: &webhook_subscription::Model,
    sent: Sent,
) -> Result<(), JobError> {
    let cfg = &deps.state.config;
    let last = attempt >= cfg.webhook_max_attempts;
    let wait = (sent.error.is_some() && !last).then(|| {
        backoff::delay_before_attempt(
            attempt + 1,
            Duration::from_millis(cfg.webhook_backoff_base_ms),
            Duration::from_millis(cfg.webhook_backoff_max_ms),
        )
    });
    let next_retry_at =
        wait.map(|w| sent.started_at + chrono::Duration::from_std(w).unwrap_or_default());
    let outcome = record(
        deps,
        d.id,
        d.replays,
        sub.failure_streak > 0,
        attempt_of(d, &sent, next_retry_at),
        last,
    )
    .await?;
    match (sent.error, outcome) {
        (None, _) | (Some(_), Recorded::Stopped) => Ok(()),
        (Some(e), Recorded::Continue) if last => {
            Err(JobError::Permanent(format!("{e} after {attempt} attempts")))
        }
        (Some(e), Recorded::Continue) => Err(JobError::RetryAfter(e, wait.unwrap_or_default())),
    }
}

enum Recorded {
    /// Retry (or dead-letter) as planned.
    Continue,
    /// Nothing more for this job: the endpoint was disabled by this failure, or a newer
    /// series took the delivery over meanwhile.
    Stopped,
}

/// The attempt, the delivery's new state and the endpoint's failure streak, in one
/// transaction under the delivery's lock; a streak past the published threshold disables
/// the endpoint.
async fn record(
    deps: &JobDeps,
    delivery: Uuid,
    series: i32,
    streak_running: bool,
    mut a: webhook_attempt::Model,
    last: bool,
) -> Result<Recorded, JobError> {
    let st = &deps.state;
    let cfg = &st.config;
    let now = a.started_at;
    // Most attempts succeed with no failure streak to reset: one statement then.
    if a.succeeded
        && !streak_running
        && !store::webhooks::record_successes(&st.db, series, std::slice::from_ref(&a))
            .await
            .map_err(retryable)?
            .is_empty()
    {
        return Ok(Recorded::Continue);
    }
    let txn = store::begin(&st.db).await.map_err(retryable)?;
    let Some(mut d) = store::webhooks::lock_delivery(&txn, delivery)
        .await
        .map_err(retryable)?
    else {
        return Err(JobError::Permanent("the delivery no longer exists".into()));
    };
    let superseded = d.replays != series || d.state != PENDING;
    d.attempts += 1;
    a.attempt = d.attempts;
    d.updated_at = Utc::now();
    let mut outcome = Recorded::Continue;
    if superseded {
        // Keep the attempt in the history; the newer series owns the state.
        a.next_retry_at = None;
        outcome = Recorded::Stopped;
    } else {
        d.last_status_code = a.status_code;
        d.last_error = a.error.clone();
        d.next_attempt_at = a.next_retry_at;
    }
    if a.succeeded {
        if !superseded || d.state == PENDING {
            d.state = DELIVERED;
            d.delivered_at = Some(now);
            d.next_attempt_at = None;
        }
        // Most deliveries succeed with no failure streak running: nothing to reset then.
        if streak_running {
            store::webhooks::note_success(&txn, d.subscription_id)
                .await
                .map_err(retryable)?;
        }
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
            metrics::counter!(m::WEBHOOK_DISABLED).increment(1);
        }
        if !superseded && failing {
            d.state = SUSPENDED;
            d.next_attempt_at = None;
            a.next_retry_at = None;
            outcome = Recorded::Stopped;
        } else if !superseded && last {
            d.state = DEAD;
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

/// Sets a delivery aside while its endpoint is disabled, under the subscription's lock so an
/// enable that commits first is seen (and this delivery then goes out after all).
pub(super) async fn suspend(deps: &JobDeps, d: &webhook_delivery::Model) -> Result<(), JobError> {
    let st = &deps.state;
    let txn = store::begin(&st.db).await.map_err(retryable)?;
    let sub = store::webhooks::lock_subscription(&txn, d.subscription_id)
        .await
        .map_err(retryable)?;
    let Some(mut d) = store::webhooks::lock_delivery(&txn, d.id)
        .await
        .map_err(retryable)?
    else {
        return Ok(());
    };
    if sub.is_some_and(|s| s.state == DISABLED) && d.state == PENDING {
        d.state = SUSPENDED;
        d.next_attempt_at = None;
        d.updated_at = Utc::now();
        store::webhooks::update_delivery(&txn, d)
            .await
            .map_err(retryable)?;
    } else if d.state == PENDING {
        // Enabled meanwhile: send it after all, as a new series.
        let d = store::webhooks::requeue(&txn, d, Utc::now())
            .await
            .map_err(retryable)?;
        deliver_webhook(&txn, &d).await.map_err(retryable)?;
    }
    txn.commit().await.map_err(retryable)?;
    Ok(())
}

/// The runtime dead-lettered a job of this type (its own errors ran out of attempts): the
/// delivery it was sending is DEAD, unless a newer series owns it.
pub async fn on_dead_letter(deps: &JobDeps, env: &QueuedJob) {
    let Ok(p) = serde_json::from_value::<Payload>(env.payload.clone()) else {
        return;
    };
    let db = &deps.state.db;
    let result = async {
        let txn = store::begin(db).await?;
        if let Some(mut d) = store::webhooks::lock_delivery(&txn, p.delivery_id).await?
            && d.state == PENDING
            && d.replays == p.series
        {
            d.state = DEAD;
            d.next_attempt_at = None;
            d.updated_at = Utc::now();
            store::webhooks::update_delivery(&txn, d).await?;
        }
        txn.commit().await
    }
    .await;
    if let Err(e) = result {
        tracing::error!(delivery = %p.delivery_id, error = %e, "could not mark a dead-lettered delivery DEAD");
    }
    // A dead delivery no longer holds its resource's later events back.
    if let Ok(Some((d, _))) =
        store::webhooks::find_delivery_with_subscription(db, p.delivery_id).await
    {
        wake_next(deps, &d).await;
    }
}

/// Deliveries still PENDING well past their due time have lost their job (a queue row lost
/// to an outage): each gets a new series. Safe on several workers: each requeue locks the
/// row and re-checks it.
pub async fn requeue_stalled(
    db: &crate::store::Db,
    now: chrono::DateTime<Utc>,
) -> Result<usize, DbErr> {
    let cutoff = now - chrono::Duration::minutes(15);
    let mut n = 0;
    for found in store::webhooks::stalled(db, cutoff, 200).await? {
        let txn = store::begin(db).await?;
        if let Some(d) = store::webhooks::lock_delivery(&txn, found.id).await?
            && d.state == PENDING
            && d.updated_at <= cutoff
        {
            let d = store::webhooks::requeue(&txn, d, now).await?;
            deliver_webhook(&txn, &d).await?;
            n += 1;
        }
        txn.commit().await?;
    }
    Ok(n)
}
