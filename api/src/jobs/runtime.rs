//! Starts and stops the job workers and the outbox relay: in `wallet-worker run`, and inside
//! the API process in embedded mode.
use std::{
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use apalis::prelude::*;
use chrono::Utc;
use futures::FutureExt;
use tokio::{sync::watch, task::JoinHandle};
use tracing::Instrument;

use super::{
    JobError, QueuedJob, context::JobDeps, poll::Tick, relay, report_run, retry, sms_send,
    webhook_batch, webhook_deliver,
};
use crate::{
    infra::{
        current_request::{self, Origin},
        telemetry::{metrics as m, trace},
    },
    jobs::sms::{HttpProvider, MockProvider, SmsProvider, UnconfiguredProvider},
    state::AppState,
    store,
    store::queues::job_queue::Queue,
};

/// One apalis queue per job type.
pub use crate::domain::outbox::job_requests::QUEUES;

/// Heartbeats a worker may miss before its jobs count as abandoned and are run again.
const MISSED_HEARTBEATS: usize = 3;
/// The pause before a failed queue worker is restarted.
const RESTART_PAUSE: Duration = Duration::from_millis(250);

pub struct Runtime {
    stop: watch::Sender<bool>,
    monitor: MonitorContext,
    tasks: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// Spawns the relay, the metrics sampler and one apalis worker per queue.
    pub fn start(state: AppState) -> anyhow::Result<Runtime> {
        let cfg = &state.config;
        let sms_live: Arc<dyn SmsProvider> = match &cfg.sms_provider_url {
            Some(url) => Arc::new(HttpProvider::new(
                url.clone(),
                cfg.sms_provider_token.clone(),
                Duration::from_millis(cfg.sms_provider_timeout_ms),
            )?),
            None => Arc::new(UnconfiguredProvider),
        };
        let webhook_timeout = Duration::from_millis(cfg.webhook_timeout_ms);
        // Every connection resolves through the SSRF guard, which pins what it approved; no
        // proxy, whose own DNS would bypass it.
        let http = reqwest::Client::builder()
            .timeout(webhook_timeout)
            .connect_timeout(webhook_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(crate::domain::webhooks::PinnedResolver::system(
                cfg.webhook_allow_private_targets,
            )))
            .no_proxy()
            .user_agent("wallet-webhooks/1")
            .build()?;
        let deps = Arc::new(JobDeps {
            sms_mock: Arc::new(MockProvider::new(state.db.clone())),
            sms_live,
            http,
            webhook_slots: tokio::sync::Semaphore::new(cfg.webhook_concurrency),
            state: state.clone(),
        });
        // Unique per process start: apalis refuses a worker name seen in the last 30 s.
        let instance = format!(
            "{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let poll = Duration::from_millis(cfg.outbox_poll_ms.max(100));
        let concurrency = cfg.job_concurrency;
        let heartbeat = Duration::from_secs(cfg.job_heartbeat_secs);

        let mut monitor = Monitor::new()
            .should_restart(|ctx, err| {
                tracing::error!(worker = %ctx.name(), error = %err, "job worker stopped; restarting");
                // apalis restarts at once, and a worker whose database is unreachable
                // fails at once: without a pause that is a hot loop (72,000 restarts in
                // four seconds of an outage, in the fault suite). The callback is
                // synchronous, so the pause blocks this one thread, briefly.
                std::thread::sleep(RESTART_PAUSE);
                true
            })
            .shutdown_timeout(Duration::from_secs(30));
        for queue in QUEUES {
            let instance = instance.clone();
            // SQLite has one writer: more deliveries in flight than other jobs only queue
            // on its lock and hold pool connections the API needs. A batch job sends many
            // deliveries at once, so a few of them fill the process's webhook slots.
            let concurrency = match (&state.queue, *queue) {
                (Queue::Postgres(_), webhook_deliver::JOB_TYPE) => cfg.webhook_concurrency,
                (Queue::Sqlite(_), webhook_deliver::JOB_TYPE) => {
                    cfg.webhook_concurrency.min(concurrency)
                }
                // A report is long and heavy on the database: one per process at a time.
                (_, report_run::JOB_TYPE) => 1,
                _ => concurrency,
            };
            let name = move |restarts: usize| format!("{queue}-{instance}-{restarts}");
            match &state.queue {
                Queue::Sqlite(pool) => {
                    let storage = apalis_sqlite::SqliteStorage::<QueuedJob>::new(pool).with_config(
                        apalis_sqlite::Config::default()
                            .queue(*queue)
                            .heartbeat_interval(heartbeat)
                            .missed_heartbeats(MISSED_HEARTBEATS),
                    );
                    let deps = deps.clone();
                    let name = name.clone();
                    let queue = state.queue.clone();
                    monitor = monitor.register(move |restarts| {
                        hand_back_previous(&queue, restarts, &name);
                        WorkerBuilder::new(name(restarts))
                            .backend(storage.clone().poll_with_strategy(Tick::new(poll)))
                            .data(deps.clone())
                            .concurrency(concurrency)
                            .build(handle)
                    });
                }
                Queue::Postgres(pool) => {
                    let storage = apalis_postgres::PostgresStorage::<QueuedJob>::new(pool)
                        .with_config(
                            apalis_postgres::Config::default()
                                .queue(*queue)
                                // A fetch per `concurrency` jobs rather than per ten keeps
                                // a busy queue's slots full.
                                .batch_size(concurrency.max(1))
                                .heartbeat_interval(heartbeat)
                                .missed_heartbeats(MISSED_HEARTBEATS),
                        );
                    let deps = deps.clone();
                    let name = name.clone();
                    let queue = state.queue.clone();
                    monitor = monitor.register(move |restarts| {
                        hand_back_previous(&queue, restarts, &name);
                        WorkerBuilder::new(name(restarts))
                            .backend(
                                storage
                                    .clone()
                                    .with_pubsub()
                                    .poll_with_strategy(Tick::new(poll)),
                            )
                            .data(deps.clone())
                            .concurrency(concurrency)
                            .build(handle)
                    });
                }
            }
        }
        // Per job type, the counters alerts watch exist at 0 before the first failure.
        for job_type in QUEUES {
            metrics::counter!(m::JOB_RETRIES, "job_type" => *job_type).absolute(0);
            metrics::counter!(m::JOB_DEAD_LETTERS, "job_type" => *job_type).absolute(0);
        }
        let ctx = monitor.context();
        let (stop, stop_rx) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(async move {
                if let Err(e) = monitor.run().await {
                    tracing::error!(error = %e, "job monitor ended");
                }
            }),
            tokio::spawn(relay::run_loop(state.clone(), stop_rx.clone())),
            tokio::spawn(sample_metrics(state.clone(), stop_rx.clone())),
            tokio::spawn(super::retention::run_loop(state.clone(), stop_rx.clone())),
            tokio::spawn(super::snapshots::run_loop(state.clone(), stop_rx.clone())),
            tokio::spawn(checkpoint_wal(state.clone(), stop_rx.clone())),
            tokio::spawn(sweep(state, stop_rx)),
        ];
        Ok(Runtime {
            stop,
            monitor: ctx,
            tasks,
        })
    }

    /// Stops taking work, lets running jobs finish, and waits for everything to end.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.monitor.shutdown();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(35), t).await;
        }
    }
}

/// A restarted worker's previous incarnation failed, and the jobs it was running ended
/// with it (apalis keeps them inside the worker's stream): put them back in the queue now,
/// in the background, rather than after the dead-worker timeout. If the database is still
/// away, that timeout remains the backstop.
fn hand_back_previous(queue: &Queue, restarts: usize, name: &impl Fn(usize) -> String) {
    let Some(previous) = restarts.checked_sub(1).map(name) else {
        return;
    };
    let queue = queue.clone();
    tokio::spawn(async move {
        match queue.hand_back(&previous).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!(worker = %previous, jobs = n, "handed back a failed worker's jobs")
            }
            Err(e) => {
                tracing::warn!(worker = %previous, error = %e, "could not hand back a failed worker's jobs; they run again once it counts as dead")
            }
        }
    });
}

async fn handle(env: QueuedJob, deps: Data<Arc<JobDeps>>) -> Result<(), BoxDynError> {
    let deps: &JobDeps = &deps;
    let mut timeout = Duration::from_millis(deps.state.config.job_timeout_ms);
    if env.job_type == webhook_batch::JOB_TYPE {
        // A hang guard only: a batch's requests have their own timeout, but a resource's
        // events go one after another and wait for free webhook slots.
        timeout *= 4;
    }
    if env.job_type == report_run::JOB_TYPE {
        // A report reads a range of the ledger: its own, longer limit.
        timeout = Duration::from_secs(deps.state.config.report_timeout_secs);
    }
    let span = tracing::info_span!(
        "job",
        job_id = %env.job_id,
        job_type = %env.job_type,
        attempt = env.attempt,
        request_id = tracing::field::Empty,
        otel.name = tracing::field::Empty,
    );
    // The job continues the trace of the request that caused it, and its log lines carry
    // that request's id; so does anything it writes to the outbox.
    let arrived = env.origin.clone();
    if let Some(o) = &arrived {
        span.record("request_id", o.request_id.as_str());
    }
    let arrived_tp = arrived.as_ref().and_then(|o| o.traceparent.as_deref());
    trace::continue_trace(&span, arrived_tp);
    if trace::enabled() {
        span.record("otel.name", format!("job {}", env.job_type));
    }
    let origin = Origin {
        request_id: arrived
            .as_ref()
            .map(|o| o.request_id.clone())
            .unwrap_or_else(current_request::new_request_id),
        traceparent: trace::traceparent(&span, arrived_tp),
    };
    current_request::within(origin, handle_in_span(deps, env, timeout).instrument(span)).await
}

async fn handle_in_span(
    deps: &JobDeps,
    env: QueuedJob,
    timeout: Duration,
) -> Result<(), BoxDynError> {
    let started = Instant::now();
    let run = AssertUnwindSafe(tokio::time::timeout(timeout, dispatch(deps, &env))).catch_unwind();
    let failure = match run.await {
        Ok(Ok(Ok(()))) => {
            record_run(&env, started, "success");
            let waited = (Utc::now() - env.first_enqueued_at)
                .num_milliseconds()
                .max(0) as f64
                / 1000.0;
            metrics::histogram!(m::JOB_QUEUE_WAIT, "job_type" => env.job_type.clone())
                .record(waited);
            return Ok(());
        }
        Ok(Ok(Err(e))) => e,
        Ok(Err(_)) => JobError::Retryable(format!("attempt timed out after {timeout:?}")),
        Err(_) => JobError::Retryable("the job panicked".into()),
    };
    after_failure(deps, &env, failure, started).await
}

fn record_run(env: &QueuedJob, started: Instant, outcome: &'static str) {
    metrics::histogram!(
        m::JOB_RUN_DURATION,
        "job_type" => env.job_type.clone(),
        "outcome" => outcome,
    )
    .record(started.elapsed().as_secs_f64());
}

async fn dispatch(deps: &JobDeps, env: &QueuedJob) -> Result<(), JobError> {
    match env.job_type.as_str() {
        sms_send::JOB_TYPE => sms_send::run(deps, env).await,
        webhook_deliver::JOB_TYPE => webhook_deliver::run(deps, env).await,
        webhook_batch::JOB_TYPE => webhook_batch::run(deps, env).await,
        report_run::JOB_TYPE => report_run::run(deps, env).await.map_err(|f| match f {
            report_run::Failure::Retryable(m) => JobError::Retryable(m),
            report_run::Failure::Permanent(m) => JobError::Permanent(m),
        }),
        other => Err(JobError::Permanent(format!("unknown job type {other}"))),
    }
}

/// Tells apalis how an attempt ended once its follow-up is written. The apalis row of this
/// attempt ends as Killed either way: the job's life goes on in a new row.
async fn after_failure(
    deps: &JobDeps,
    env: &QueuedJob,
    failure: JobError,
    started: Instant,
) -> Result<(), BoxDynError> {
    let message = failure.to_string();
    match retry::settle_failure(deps, env, failure).await {
        Ok(settled) => {
            record_run(env, started, settled.as_str());
            Err(AbortError::new(JobFailed(message)).into())
        }
        Err(e) => {
            // Neither the retry nor the dead letter could be written (database down): let
            // apalis run this attempt again, after a pause rather than in a hot loop.
            tracing::error!(error = %e, "could not record a failed job attempt");
            tokio::time::sleep(Duration::from_secs(2)).await;
            Err(JobFailed(format!("{message}; and recording it failed: {e}")).into())
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct JobFailed(String);

/// Queue depth, dead letters and outbox lag as gauges, every few seconds. Each is read
/// through an index that holds only what it counts (live jobs, dead letters, unrelayed
/// events), so the cost stays flat however much history the tables keep.
async fn sample_metrics(state: AppState, mut stop: watch::Receiver<bool>) {
    loop {
        if let Ok(rows) = state.queue.depth().await {
            let mut depth: std::collections::BTreeMap<(String, &str), f64> = QUEUES
                .iter()
                .flat_map(|q| {
                    [
                        ((q.to_string(), "pending"), 0.0),
                        ((q.to_string(), "running"), 0.0),
                    ]
                })
                .collect();
            for (job_type, status, n) in rows {
                use apalis_core::task::status::Status;
                // apalis keeps its job status as text (`Status`'s own spelling).
                let status = match status.parse::<Status>() {
                    Ok(Status::Running) => "running",
                    _ => "pending",
                };
                *depth.entry((job_type, status)).or_default() += n as f64;
            }
            for ((job_type, status), n) in depth {
                metrics::gauge!(m::JOB_QUEUE_DEPTH, "job_type" => job_type, "status" => status)
                    .set(n);
            }
        }
        if let Ok(rows) = store::queues::dead_letters::dead_per_queue(&state.db).await {
            let mut per_queue: std::collections::BTreeMap<String, f64> =
                QUEUES.iter().map(|q| (q.to_string(), 0.0)).collect();
            for (queue, n) in rows {
                per_queue.insert(queue, n as f64);
            }
            for (queue, n) in per_queue {
                metrics::gauge!(m::DEAD_LETTERS, "queue" => queue).set(n);
            }
        }
        if let Ok(n) = store::outbox::pending_count(&state.db).await {
            metrics::gauge!(m::OUTBOX_PENDING).set(n as f64);
        }
        if let Ok(age) = store::outbox::oldest_pending_age(&state.db, Utc::now()).await {
            metrics::gauge!(m::OUTBOX_OLDEST_AGE).set(age);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Keeps SQLite's write-ahead log short without making a writer copy it (see
/// `store::db::checkpoint`). Nothing to do on PostgreSQL.
async fn checkpoint_wal(state: AppState, mut stop: watch::Receiver<bool>) {
    if sea_orm::ConnectionTrait::get_database_backend(&state.db) != sea_orm::DbBackend::Sqlite {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(store::db::CHECKPOINT_EVERY) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = store::db::checkpoint(&state.db).await {
            tracing::warn!(error = %e, "checkpointing the SQLite WAL failed");
        }
    }
}

/// Lapses enrollments past their pending-proof window, expires promotional grants past
/// their `expires_at`, expires offers nobody redeemed, and closes checkout sessions past their
/// deadline. Safe on any number of workers at once (see `enrollment::expire_due`).
async fn sweep(state: AppState, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_secs(state.config.sweep_interval_secs);
    loop {
        let ended = crate::domain::incentives::expiry::run_all(&state.db).await;
        if ended != crate::domain::incentives::expiry::Ended::default() {
            tracing::info!(
                lapsed = ended.enrollments_lapsed,
                grants_expired = ended.grants_expired,
                offers_expired = ended.offers_expired,
                checkout_sessions_expired = ended.checkout_sessions_expired,
                "expiry sweep"
            );
        }
        let now = Utc::now();
        match webhook_deliver::requeue_stalled(&state.db, now).await {
            Ok(n) if n > 0 => tracing::warn!(requeued = n, "stalled webhook deliveries requeued"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "requeueing stalled webhook deliveries failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}
