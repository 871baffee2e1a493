//! Job `webhook_batch`: the first attempt of deliveries the relay wrote together for one
//! subscription, up to `MAX_DELIVERIES` of them. One job reads them all, sends them
//! concurrently (a resource's events one after another, in sequence order) and records
//! every success in one statement; per-delivery jobs would cost the queue and the database
//! several writes each, which is what limited delivery throughput.
//!
//! Anything other than a clean first attempt leaves the batch as a `webhook_deliver` job
//! of that one delivery, with the job id the delivery's own id, so the single-delivery
//! path keeps every rule: a failed attempt is recorded and its retry scheduled (or the
//! delivery dead-lettered) exactly as that job's would be; an event waiting for an earlier
//! one of its resource is deferred; a disabled endpoint's deliveries are set aside.
//!
//! A batch that cannot finish (the database is down) is re-run by the runtime. Its
//! deliveries stay PENDING: one already sent and recorded is skipped on the re-run, one
//! whose failure was recorded goes on as its own job, and if the batch is dead-lettered the
//! stalled-delivery sweep gives the rest a new series.
use std::collections::BTreeMap;

use chrono::Utc;
use entities::webhook_delivery;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::{
    JobError, QueuedJob,
    context::JobDeps,
    retry,
    webhook_deliver::{self, Sent, retryable},
};
use crate::{
    domain::webhooks::{self, DISABLED, PENDING},
    store,
};

pub use crate::domain::outbox::job_requests::WEBHOOK_BATCH as JOB_TYPE;

/// Deliveries per batch job. Bounded so that a slow endpoint holds few first attempts and a
/// batch's statements stay small.
pub const MAX_DELIVERIES: usize = 50;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Payload {
    pub subscription_id: Uuid,
    /// In the order the relay wrote them.
    pub deliveries: Vec<Uuid>,
}

/// The `webhook_deliver` job that carries delivery `d` (series 0) on from `attempt`.
fn single(env: &QueuedJob, d: &webhook_delivery::Model, attempt: u32) -> QueuedJob {
    let mut one = QueuedJob::first(
        d.id,
        webhook_deliver::JOB_TYPE,
        Some(d.merchant_id),
        json!(webhook_deliver::Payload {
            delivery_id: d.id,
            series: 0
        }),
        env.first_enqueued_at,
    )
    .descending_from(d.request_id.as_ref(), d.traceparent.as_ref());
    one.attempt = attempt;
    one
}

pub async fn run(deps: &JobDeps, env: &QueuedJob) -> Result<(), JobError> {
    let st = &deps.state;
    let p: Payload = serde_json::from_value(env.payload.clone())
        .map_err(|e| JobError::Permanent(format!("undecodable webhook batch: {e}")))?;
    let Some(sub) = store::webhooks::find_subscription(&st.db, p.subscription_id)
        .await
        .map_err(retryable)?
    else {
        return Err(JobError::Permanent(
            "the subscription no longer exists".into(),
        ));
    };
    let mut fresh = Vec::new();
    let mut handed_on = Vec::new();
    for d in store::webhooks::deliveries_by_ids(&st.db, &p.deliveries)
        .await
        .map_err(retryable)?
    {
        // Only a series-0 PENDING delivery is still this batch's; any other has an owner.
        if d.state != PENDING || d.replays != 0 {
            continue;
        }
        if d.attempts == 0 {
            fresh.push(d);
        } else {
            // An earlier run of this batch recorded a failed attempt: its next attempt is
            // already queued, unless writing it failed. Queue it (a no-op if it exists).
            let attempt = u32::try_from(d.attempts)
                .unwrap_or(u32::MAX)
                .saturating_add(1);
            handed_on.push((single(env, &d, attempt), None));
        }
    }
    if sub.state == DISABLED {
        for d in &fresh {
            webhook_deliver::suspend(deps, d).await?;
        }
        return hand_on(deps, handed_on).await;
    }

    // A resource's events in sequence order, one chain per resource.
    let mut chains: BTreeMap<&str, Vec<&webhook_delivery::Model>> = BTreeMap::new();
    for d in &fresh {
        chains.entry(d.resource_key.as_str()).or_default().push(d);
    }
    for chain in chains.values_mut() {
        chain.sort_by_key(|d| d.sequence_number);
    }
    // A chain whose first event has an earlier one of its resource still PENDING outside
    // the chains waits for it (sequence numbers start at 1, so most chains need no look).
    // Outside includes this batch's own handed-on deliveries: on a re-run, one whose failed
    // attempt was recorded still holds its resource's later events back.
    let keys: Vec<&str> = chains
        .iter()
        .filter(|(_, c)| c[0].sequence_number > 1)
        .map(|(k, _)| *k)
        .collect();
    let sending: Vec<Uuid> = fresh.iter().map(|d| d.id).collect();
    let earliest: BTreeMap<String, i64> =
        store::webhooks::earliest_pending_outside(&st.db, sub.id, &keys, &sending)
            .await
            .map_err(retryable)?
            .into_iter()
            .collect();
    let waiting = |chain: &[&webhook_delivery::Model]| {
        earliest
            .get(chain[0].resource_key.as_str())
            .is_some_and(|&e| e < chain[0].sequence_number)
    };

    let secrets = webhooks::live_secrets(&st.sealer, &sub, Utc::now())
        .map_err(|e| JobError::Permanent(e.to_string()))?;
    // One target check for the batch: its sends go out together.
    let allowed = webhook_deliver::allowed_target(deps, &sub).await;
    let refused = allowed.as_ref().err();
    let target = webhook_deliver::Target::of(&sub);
    let sends = chains.values().map(|chain| {
        let secrets = &secrets;
        let target = &target;
        let blocked = waiting(chain);
        async move {
            let mut sent = Vec::new();
            let mut deferred = Vec::new();
            for (i, d) in chain.iter().enumerate() {
                if blocked {
                    deferred.push(*d);
                    continue;
                }
                let s = webhook_deliver::send(deps, target, secrets, refused, d).await;
                let failed = s.error.is_some();
                sent.push((*d, s));
                if failed {
                    // The rest of the resource's events wait for this one's retries.
                    deferred.extend_from_slice(&chain[i + 1..]);
                    break;
                }
            }
            (sent, deferred)
        }
    });
    let results = futures::future::join_all(sends).await;

    let mut delivered = Vec::new();
    let mut unsettled: Vec<(&webhook_delivery::Model, Sent)> = Vec::new();
    let mut waiting = Vec::new();
    for (sent, deferred) in results {
        for (d, s) in sent {
            // A running failure streak is reset under the delivery's lock (`conclude`).
            if s.error.is_none() && sub.failure_streak == 0 {
                delivered.push((d, s));
            } else {
                unsettled.push((d, s));
            }
        }
        waiting.extend(deferred.into_iter().map(|d| d.id));
    }
    // The chains that must wait go on together as one batch, put off: when the delivery
    // they wait for settles it wakes this batch, whose chains then go out one event after
    // another in this process. (As single jobs, a long chain advanced one event per queue
    // round trip, and every look at it wrote a queue row per event.)
    if !waiting.is_empty() {
        let mut rest = env.clone();
        rest.payload = json!(Payload {
            subscription_id: p.subscription_id,
            deliveries: waiting,
        });
        let wait = webhook_deliver::deferral(&rest);
        handed_on.push((rest, Some(JobError::Deferred(wait))));
    }
    let attempts: Vec<_> = delivered
        .iter()
        .map(|(d, s)| webhook_deliver::attempt_of(d, s, None))
        .collect();
    let recorded = store::webhooks::record_successes(&st.db, 0, &attempts)
        .await
        .map_err(retryable)?;
    // The last event of each resource this batch settled: the one whose successor, sent
    // by another job, may be waiting for it.
    let mut chain_ends: BTreeMap<&str, &webhook_delivery::Model> = BTreeMap::new();
    for (d, s) in delivered {
        if recorded.contains(&d.id) {
            chain_end(&mut chain_ends, d);
        } else {
            // Settled or superseded meanwhile: recorded under its lock instead.
            unsettled.push((d, s));
        }
    }
    for (d, s) in unsettled {
        let ok = s.error.is_none();
        match webhook_deliver::conclude(deps, 1, d, &sub, s).await {
            Ok(()) if ok => chain_end(&mut chain_ends, d),
            Ok(()) => {}
            Err(failure) => handed_on.push((single(env, d, 1), Some(failure))),
        }
    }
    let chain_ends: Vec<_> = chain_ends.into_values().collect();
    webhook_deliver::wake_next_of(deps, sub.id, &chain_ends).await;
    hand_on(deps, handed_on).await
}

/// `later`, a batch of waiting chains just deferred, runs now if one of its chains no
/// longer waits for anything outside it (see `retry::settle_failure`).
pub(super) async fn wake_if_unblocked(deps: &JobDeps, later: &QueuedJob) {
    let Ok(p) = serde_json::from_value::<Payload>(later.payload.clone()) else {
        return;
    };
    let Some(&first) = p.deliveries.first() else {
        return;
    };
    let db = &deps.state.db;
    let woken = async {
        let waiting = store::webhooks::deliveries_by_ids(db, &p.deliveries)
            .await
            .map_err(|e| e.to_string())?;
        // Each chain's first event: the lowest sequence number of its resource here.
        let mut heads: BTreeMap<&str, i64> = BTreeMap::new();
        for d in &waiting {
            let head = heads.entry(d.resource_key.as_str()).or_insert(i64::MAX);
            *head = (*head).min(d.sequence_number);
        }
        let keys: Vec<&str> = heads.keys().copied().collect();
        let earliest: BTreeMap<String, i64> =
            store::webhooks::earliest_pending_outside(db, p.subscription_id, &keys, &p.deliveries)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .collect();
        let unblocked = heads
            .iter()
            .any(|(k, head)| earliest.get(*k).is_none_or(|e| e > head));
        if unblocked {
            webhook_deliver::run_now(deps, JOB_TYPE, first).await?;
        }
        Ok::<(), String>(())
    }
    .await;
    if let Err(e) = woken {
        tracing::warn!(subscription = %p.subscription_id, error = %e, "looking again at a deferred batch failed");
    }
}

/// Keeps `d` as its resource's chain end if it is the latest settled so far.
fn chain_end<'a>(
    ends: &mut BTreeMap<&'a str, &'a webhook_delivery::Model>,
    d: &'a webhook_delivery::Model,
) {
    let end = ends.entry(d.resource_key.as_str()).or_insert(d);
    if d.sequence_number > end.sequence_number {
        *end = d;
    }
}

/// Queues what the batch leaves to single-delivery jobs: a failed attempt's retry or dead
/// letter, a deferral, or (no failure) the attempt itself. Every one is tried; the batch is
/// re-run if any could not be written.
async fn hand_on(deps: &JobDeps, jobs: Vec<(QueuedJob, Option<JobError>)>) -> Result<(), JobError> {
    let mut unwritten = None;
    for (one, failure) in jobs {
        let written = match failure {
            Some(failure) => retry::settle_failure(deps, &one, failure).await.map(|_| ()),
            None => one
                .enqueue(&deps.state.queue, std::time::Duration::ZERO)
                .await
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = written {
            unwritten = Some(e);
        }
    }
    match unwritten {
        Some(e) => Err(JobError::Retryable(format!(
            "queueing a delivery's next step failed: {e}"
        ))),
        None => Ok(()),
    }
}

/// The subscriptions a relay batch's new deliveries go to, each with its jobs' payloads:
/// per (subscription, merchant), in the relay's order, at most `MAX_DELIVERIES` each.
pub fn payloads(deliveries: &[(Uuid, Uuid, Uuid)]) -> Vec<(Uuid, Payload)> {
    let mut out: Vec<(Uuid, Payload)> = Vec::new();
    let mut open: BTreeMap<(Uuid, Uuid), usize> = BTreeMap::new();
    for &(delivery, subscription, merchant) in deliveries {
        let slot = open.get(&(subscription, merchant)).copied();
        match slot {
            Some(i) if out[i].1.deliveries.len() < MAX_DELIVERIES => {
                out[i].1.deliveries.push(delivery)
            }
            _ => {
                open.insert((subscription, merchant), out.len());
                out.push((
                    merchant,
                    Payload {
                        subscription_id: subscription,
                        deliveries: vec![delivery],
                    },
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_batch_becomes_one_job_per_subscription_and_merchant_in_order_and_bounded() {
        let (s1, s2, m1, m2) = (
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
        );
        let mut rows = Vec::new();
        let mut ids = Vec::new();
        for i in 0..(MAX_DELIVERIES + 3) {
            let d = Uuid::now_v7();
            ids.push(d);
            rows.push((d, s1, m1));
            if i % 10 == 0 {
                rows.push((Uuid::now_v7(), s2, m1));
                rows.push((Uuid::now_v7(), s1, m2));
            }
        }
        let jobs = payloads(&rows);
        let of = |s: Uuid, m: Uuid| -> Vec<&Payload> {
            jobs.iter()
                .filter(|(mm, p)| *mm == m && p.subscription_id == s)
                .map(|(_, p)| p)
                .collect()
        };
        let s1m1 = of(s1, m1);
        assert_eq!(s1m1.len(), 2, "split at MAX_DELIVERIES");
        assert_eq!(s1m1[0].deliveries.len(), MAX_DELIVERIES);
        let joined: Vec<Uuid> = s1m1.iter().flat_map(|p| p.deliveries.clone()).collect();
        assert_eq!(joined, ids, "the relay's order is kept");
        assert_eq!(of(s2, m1).len(), 1);
        assert_eq!(
            of(s1, m2).len(),
            1,
            "a merchant's deliveries are its own job"
        );
        assert!(
            jobs.iter()
                .all(|(_, p)| p.deliveries.len() <= MAX_DELIVERIES)
        );
    }
}
