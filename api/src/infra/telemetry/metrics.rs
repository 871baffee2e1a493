//! The metric families this service exposes, in one place: each name, its type, its help
//! text and (for histograms) its buckets. Code that records a metric names it by one of
//! these constants, so the catalogue in `docs/operations/metrics.md`, the chart's alerts and
//! dashboard (`helm/metrics-catalogue.txt`) and the scrape can be checked against each other.
//!
//! Conventions (Prometheus): a `wallet_` prefix, base units in the name (`_seconds`),
//! counters end in `_total`, latencies are histograms (summaries cannot be aggregated across
//! pods), and label values come from small fixed sets, never from ids.
use std::sync::OnceLock;

use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const HTTP_REQUEST_DURATION: &str = "wallet_http_request_duration_seconds";
pub const HTTP_IN_FLIGHT: &str = "wallet_http_requests_in_flight";
pub const HTTP_SHED: &str = "wallet_http_requests_shed_total";
pub const HTTP_DEADLINE_EXCEEDED: &str = "wallet_http_request_deadline_exceeded_total";

pub const DB_POOL_CONNECTIONS: &str = "wallet_db_pool_connections";
pub const DB_POOL_MAX: &str = "wallet_db_pool_max_connections";
pub const DB_POOL_ACQUIRE: &str = "wallet_db_pool_acquire_duration_seconds";
pub const DB_REPLICA_LAG: &str = "wallet_db_replica_lag_seconds";
pub const DB_REPLICA_LAG_BYTES: &str = "wallet_db_replica_lag_bytes";
pub const DB_REPLICA_USABLE: &str = "wallet_db_replica_usable";
pub const DB_LAGGING_READS: &str = "wallet_db_lagging_reads_total";
pub const DB_REPLICA_FALLBACKS: &str = "wallet_db_replica_fallbacks_total";

pub const REDIS_COMMAND_DURATION: &str = "wallet_redis_command_duration_seconds";
pub const REDIS_ERRORS: &str = "wallet_redis_errors_total";

pub const OUTBOX_PENDING: &str = "wallet_outbox_pending_events";
pub const OUTBOX_OLDEST_AGE: &str = "wallet_outbox_oldest_pending_age_seconds";
pub const OUTBOX_RELAYED: &str = "wallet_outbox_relayed_total";

pub const WEBHOOK_ATTEMPTS: &str = "wallet_webhook_delivery_attempts_total";
pub const WEBHOOK_DURATION: &str = "wallet_webhook_delivery_duration_seconds";
pub const WEBHOOK_DISABLED: &str = "wallet_webhook_endpoints_disabled_total";

pub const JOB_RUN_DURATION: &str = "wallet_job_run_duration_seconds";
pub const JOB_QUEUE_WAIT: &str = "wallet_job_queue_wait_seconds";
pub const JOB_RETRIES: &str = "wallet_job_retries_total";
pub const JOB_DEAD_LETTERS: &str = "wallet_job_dead_letters_total";
pub const JOB_QUEUE_DEPTH: &str = "wallet_job_queue_depth";
pub const DEAD_LETTERS: &str = "wallet_dead_letters";

pub const RETENTION_DELETED: &str = "wallet_retention_deleted_rows_total";
pub const RETENTION_LAST_SUCCESS: &str = "wallet_retention_last_success_timestamp_seconds";
pub const PARTITION_MONTHS_AHEAD: &str = "wallet_db_partition_months_ahead";

pub const SUBSYSTEM_UP: &str = "wallet_subsystem_up";
pub const BUILD_INFO: &str = "wallet_build_info";

/// Every family: name, kind, unit and help. The scrape test checks that each appears with
/// its HELP and TYPE lines.
pub const CATALOGUE: &[(&str, Kind, Option<Unit>, &str)] = &[
    (
        HTTP_REQUEST_DURATION,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time from a request's arrival to its response, by matched route template, method and status class.",
    ),
    (
        HTTP_IN_FLIGHT,
        Kind::Gauge,
        None,
        "Requests being served right now.",
    ),
    (
        HTTP_SHED,
        Kind::Counter,
        None,
        "Requests refused with a retryable 503 because the process was at capacity (admission control).",
    ),
    (
        HTTP_DEADLINE_EXCEEDED,
        Kind::Counter,
        None,
        "Requests that ran past WALLET_REQUEST_TIMEOUT_MS and were answered with a retryable error.",
    ),
    (
        DB_POOL_CONNECTIONS,
        Kind::Gauge,
        None,
        "Database connections this process holds, by state (in_use, idle).",
    ),
    (
        DB_POOL_MAX,
        Kind::Gauge,
        None,
        "The most database connections this process may open (WALLET_DB_MAX_CONNECTIONS).",
    ),
    (
        DB_POOL_ACQUIRE,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time a write transaction waited for a pooled connection and its BEGIN.",
    ),
    (
        DB_REPLICA_LAG,
        Kind::Gauge,
        Some(Unit::Seconds),
        "How far the read replica is behind the primary: how long ago the primary had written out WAL the replica has not replayed, 0 once it has replayed all the primary has written out (API processes with WALLET_DATABASE_REPLICA_URL).",
    ),
    (
        DB_REPLICA_LAG_BYTES,
        Kind::Gauge,
        None,
        "WAL bytes the read replica has still to replay.",
    ),
    (
        DB_REPLICA_USABLE,
        Kind::Gauge,
        None,
        "1 while the read replica may serve lag-tolerant reads; 0 while it is down, a promoted primary or behind WALLET_REPLICA_MAX_LAG_MS.",
    ),
    (
        DB_LAGGING_READS,
        Kind::Counter,
        None,
        "Lag-tolerant requests (transaction and event feeds, console pages) by where they were served (replica, primary).",
    ),
    (
        DB_REPLICA_FALLBACKS,
        Kind::Counter,
        None,
        "Statements that failed on the read replica and ran again on the primary.",
    ),
    (
        REDIS_COMMAND_DURATION,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time of one Redis call, including waiting for a connection, by operation.",
    ),
    (
        REDIS_ERRORS,
        Kind::Counter,
        None,
        "Redis calls that failed, by operation and kind (timeout, error).",
    ),
    (
        OUTBOX_PENDING,
        Kind::Gauge,
        None,
        "Outbox events committed but not yet relayed to their jobs.",
    ),
    (
        OUTBOX_OLDEST_AGE,
        Kind::Gauge,
        Some(Unit::Seconds),
        "Age of the oldest outbox event not yet relayed (0 when none waits): the outbox lag.",
    ),
    (
        OUTBOX_RELAYED,
        Kind::Counter,
        None,
        "Outbox events relayed to their jobs.",
    ),
    (
        WEBHOOK_ATTEMPTS,
        Kind::Counter,
        None,
        "Webhook delivery attempts, by outcome (success, http_error, timeout, connect_error, error, refused) and by the endpoint's health before the attempt (healthy: no failure streak; failing: one running).",
    ),
    (
        WEBHOOK_DURATION,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time of one webhook delivery attempt, by outcome and endpoint health.",
    ),
    (
        WEBHOOK_DISABLED,
        Kind::Counter,
        None,
        "Webhook endpoints disabled automatically after sustained failure.",
    ),
    (
        JOB_RUN_DURATION,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time one job attempt ran, by job type and outcome (success, retry, dead, deferred).",
    ),
    (
        JOB_QUEUE_WAIT,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time from a job's first enqueue to its successful completion, retries included, by job type.",
    ),
    (
        JOB_RETRIES,
        Kind::Counter,
        None,
        "Job attempts that failed and were scheduled to run again, by job type.",
    ),
    (
        JOB_DEAD_LETTERS,
        Kind::Counter,
        None,
        "Jobs that exhausted their attempts or failed permanently and went to the dead-letter store, by job type.",
    ),
    (
        JOB_QUEUE_DEPTH,
        Kind::Gauge,
        None,
        "Jobs waiting or running, by job type and status (pending, running).",
    ),
    (
        DEAD_LETTERS,
        Kind::Gauge,
        None,
        "Dead letters not yet replayed or purged, by queue.",
    ),
    (
        RETENTION_DELETED,
        Kind::Counter,
        None,
        "Rows removed by the retention jobs, by table.",
    ),
    (
        RETENTION_LAST_SUCCESS,
        Kind::Gauge,
        Some(Unit::Seconds),
        "Unix time of the last retention pass that finished without error, by table.",
    ),
    (
        PARTITION_MONTHS_AHEAD,
        Kind::Gauge,
        None,
        "Months after the current one that every partitioned history table has a partition for (PostgreSQL); a write past them would fail.",
    ),
    (
        SUBSYSTEM_UP,
        Kind::Gauge,
        None,
        "1 when the subsystem (database, redis, queue) answered its last probe, else 0.",
    ),
    (
        BUILD_INFO,
        Kind::Gauge,
        None,
        "Always 1; the version label says which build this process runs.",
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Request and call latencies: a payment takes a few milliseconds, a slow one hundreds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// A job's time from first enqueue to done spans retries with backoff: seconds to hours.
const QUEUE_WAIT_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0,
];

/// The process-wide Prometheus recorder, installed on first use, with every family
/// described (HELP) and every histogram given buckets.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(install).clone()
}

fn install() -> PrometheusHandle {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(JOB_QUEUE_WAIT.into()), QUEUE_WAIT_BUCKETS)
        .and_then(|b| b.set_buckets(LATENCY_BUCKETS))
        .expect("bucket lists are not empty");
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    let _ = metrics::set_global_recorder(recorder);
    describe();
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    // A counter first seen at 1 hides that increment from `increase()` and `rate()`: the
    // ones alerts watch exist at 0 from the start.
    for name in [
        HTTP_SHED,
        HTTP_DEADLINE_EXCEEDED,
        WEBHOOK_DISABLED,
        OUTBOX_RELAYED,
    ] {
        metrics::counter!(name).absolute(0);
    }
    // A built (not installed) recorder leaves upkeep to its owner: without it every
    // histogram observation is kept until the next scrape, so a process nobody scrapes
    // grew without bound (about 0.65 MiB a minute at 660 requests/s in the soak). Its own
    // thread: it must outlive any one runtime.
    let upkeep = handle.clone();
    let _ = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                upkeep.run_upkeep();
            }
        });
    handle
}

fn describe() {
    for &(name, kind, unit, help) in CATALOGUE {
        match (kind, unit) {
            (Kind::Counter, Some(u)) => metrics::describe_counter!(name, u, help),
            (Kind::Counter, None) => metrics::describe_counter!(name, help),
            (Kind::Gauge, Some(u)) => metrics::describe_gauge!(name, u, help),
            (Kind::Gauge, None) => metrics::describe_gauge!(name, help),
            (Kind::Histogram, Some(u)) => metrics::describe_histogram!(name, u, help),
            (Kind::Histogram, None) => metrics::describe_histogram!(name, help),
        }
    }
}

/// `2xx`, `4xx`, `5xx`...: the status label of request metrics (one series per class, not
/// per code).
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
