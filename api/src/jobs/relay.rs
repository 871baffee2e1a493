//! Moves committed outbox rows onto the queues and fans catalog events out to webhook
//! deliveries. Runs in the worker process (any number of
//! them: PostgreSQL's SKIP LOCKED shares the backlog) and inside the API in embedded mode.
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use uuid::Uuid;

use super::{QueuedJob, webhook_batch};
use crate::{
    domain::webhooks,
    infra::telemetry::trace,
    state::AppState,
    store::{
        self,
        outbox::relay::{NewDelivery, PendingRow, Plan, SubscriptionRow},
    },
};

const BATCH: i64 = 200;

/// When spans are exported, the relay of `row` is a span of the trace that wrote it, and
/// what the row becomes continues from there; the row's own traceparent otherwise.
fn relay_span(row: &PendingRow) -> Option<String> {
    if !trace::enabled() {
        return row.traceparent.clone();
    }
    let span = tracing::info_span!(
        "outbox_relay",
        event_id = %row.event_id,
        topic = %row.topic,
        request_id = row.request_id.as_deref().unwrap_or_default(),
    );
    trace::continue_trace(&span, row.traceparent.as_deref());
    let _entered = span.enter();
    trace::traceparent(&span, row.traceparent.as_deref())
}

/// What a batch turns into: a job row becomes its task; a catalog event becomes one
/// delivery per subscription that wants it (SUSPENDED for a disabled endpoint, so
/// re-enabling can replay it), and a subscription's pending ones share `webhook_batch`
/// tasks. `now` is the time the rows are marked relayed: the envelope's `emitted_at`, so
/// `GET /events` shows the very bytes the webhooks carried.
fn plan(rows: &[PendingRow], subs: &[SubscriptionRow], now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let mut sendable = Vec::new();
    // Each sendable delivery's origin: the batch job that carries it continues the trace
    // of its first delivery.
    let mut origins: std::collections::HashMap<Uuid, (Option<String>, Option<String>)> =
        std::collections::HashMap::new();
    for row in rows {
        let traceparent = relay_span(row);
        match row.kind.as_str() {
            "job" => {
                let env = QueuedJob::first(
                    row.event_id,
                    &row.topic,
                    row.merchant_id,
                    row.payload.clone(),
                    row.created_at,
                )
                .descending_from(row.request_id.as_ref(), traceparent.as_ref());
                plan.tasks
                    .push((row.topic.clone(), env.task(Duration::ZERO)));
            }
            _ => {
                let Some(merchant) = row.merchant_id else {
                    continue;
                };
                let mut body = None;
                for s in subs.iter().filter(|s| {
                    s.merchant_id == merchant
                        && webhooks::wants(
                            s.event_types.as_ref(),
                            s.bound_merchant,
                            &row.topic,
                            merchant,
                        )
                }) {
                    // `emitted_at` is the relay's: after the commit that caused the event.
                    let body = body
                        .get_or_insert_with(|| {
                            webhooks::EventEnvelope {
                                event_id: row.event_id,
                                event_type: &row.topic,
                                occurred_at: row.occurred_at,
                                emitted_at: now,
                                merchant_id: merchant,
                                data: &row.payload,
                                sequence_number: row.sequence_number,
                            }
                            .body()
                        })
                        .clone();
                    let state = if s.state == webhooks::ACTIVE {
                        webhooks::PENDING
                    } else {
                        webhooks::SUSPENDED
                    };
                    let d = NewDelivery {
                        id: Uuid::now_v7(),
                        subscription_id: s.id,
                        integration_id: s.integration_id,
                        merchant_id: merchant,
                        event_id: row.event_id,
                        event_type: row.topic.clone(),
                        resource_key: format!("{}:{}", row.resource_type, row.resource_id),
                        sequence_number: row.sequence_number,
                        body,
                        state,
                        request_id: row.request_id.clone(),
                        traceparent: traceparent.clone(),
                    };
                    if state == webhooks::PENDING {
                        sendable.push((d.id, d.subscription_id, merchant));
                        origins.insert(d.id, (d.request_id.clone(), d.traceparent.clone()));
                    }
                    plan.deliveries.push(d);
                }
            }
        }
    }
    for (merchant, batch) in webhook_batch::payloads(&sendable) {
        let (request_id, traceparent) = batch
            .deliveries
            .first()
            .and_then(|d| origins.get(d))
            .map_or((None, None), |(r, t)| (r.as_ref(), t.as_ref()));
        let env = QueuedJob::first(
            Uuid::now_v7(),
            webhook_batch::JOB_TYPE,
            Some(merchant),
            serde_json::json!(batch),
            now,
        )
        .descending_from(request_id, traceparent);
        plan.tasks.push((
            webhook_batch::JOB_TYPE.to_string(),
            env.task(Duration::ZERO),
        ));
    }
    plan
}

/// Relays one batch; returns how many rows it took.
pub async fn run_once(state: &AppState) -> anyhow::Result<usize> {
    let rows = store::outbox::relay::relay_batch(&state.db, BATCH, plan).await?;
    if !rows.is_empty() {
        metrics::counter!(crate::infra::telemetry::metrics::OUTBOX_RELAYED)
            .increment(rows.len() as u64);
    }
    Ok(rows.len())
}

pub async fn run_loop(state: AppState, mut stop: watch::Receiver<bool>) {
    let poll = Duration::from_millis(state.config.outbox_poll_ms);
    loop {
        let wait = match run_once(&state).await {
            // A full batch means more is waiting: go again at once.
            Ok(n) if n as i64 == BATCH => Duration::ZERO,
            Ok(_) => poll,
            Err(e) => {
                tracing::warn!(error = %e, "outbox relay failed; retrying");
                poll.max(Duration::from_secs(1))
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}
