//! Paying load against the service as production runs it (separate `wallet-api` and
//! `wallet-worker` processes) and the audit that follows a fault: the fault suite and the
//! HA drills share both. Clients pay with QR codes from their own wallets and retry each
//! payment under its Idempotency-Key until a definitive answer, alternating API replicas;
//! the audit then reads the database directly and asks:
//!
//! - does every acknowledged payment exist once, and nothing that was not acknowledged?
//! - is every balance its funding minus its acknowledged debits?
//! - does `wallet-api ledger check` pass?
//! - did every committed event reach the webhook receiver?
use std::time::Duration;

use serde_json::Value;

use crate::procs::{Process, binary, free_port, wait_for_port};

mod audit;
mod load;

pub use audit::{Audit, Stored, rows, wrong_balances};
pub use load::{Load, Merchant, Outcome, Refusals};

/// What each client's wallet is funded with.
pub const FUNDING: i64 = 1_000_000;

/// The settings of a service under faults, pointed at `database` and `redis`, its data in
/// `dir`: every wait short (a request 5 s, a pooled connection 1.5 s, Redis 300 ms), so a
/// dead dependency costs retryable answers at once; webhooks and jobs retried quickly and
/// long enough to outlast any fault the suites make.
pub fn fault_env(database: String, redis: String, dir: &std::path::Path) -> Vec<(String, String)> {
    env_of(&[
        ("WALLET_DATABASE_URL", database),
        ("WALLET_REDIS_URL", redis),
        (
            "WALLET_JWT_SECRET",
            "fault-suite-jwt-secret-0123456789abcdef".into(),
        ),
        (
            "WALLET_SECRET_KEY",
            "fault-suite-sealing-key-0123456789abcdef".into(),
        ),
        ("WALLET_DATA_DIR", dir.display().to_string()),
        ("WALLET_BCRYPT_COST", "10".into()),
        ("WALLET_LOG_FORMAT", "json".into()),
        ("WALLET_RUN_WORKERS", "false".into()),
        ("WALLET_REQUEST_TIMEOUT_MS", "5000".into()),
        ("WALLET_IDEMPOTENCY_WAIT_MS", "2000".into()),
        ("WALLET_DB_ACQUIRE_TIMEOUT_MS", "1500".into()),
        ("WALLET_DB_MAX_CONNECTIONS", "10".into()),
        ("WALLET_REDIS_TIMEOUT_MS", "300".into()),
        ("WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true".into()),
        ("WALLET_JOB_HEARTBEAT_SECS", "2".into()),
        ("WALLET_OUTBOX_POLL_MS", "100".into()),
        ("WALLET_WEBHOOK_TIMEOUT_MS", "3000".into()),
        ("WALLET_WEBHOOK_BACKOFF_BASE_MS", "500".into()),
        ("WALLET_WEBHOOK_BACKOFF_MAX_MS", "4000".into()),
        ("WALLET_WEBHOOK_MAX_ATTEMPTS", "30".into()),
        ("WALLET_JOB_BACKOFF_BASE_MS", "200".into()),
        ("WALLET_JOB_BACKOFF_MAX_MS", "2000".into()),
        ("WALLET_JOB_MAX_ATTEMPTS", "50".into()),
        ("WALLET_JOB_TIMEOUT_MS", "10000".into()),
        ("WALLET_SWEEP_INTERVAL_SECS", "5".into()),
        // QR mints by phone count as identifications (1,200 a minute for a sandbox): eight
        // clients would spend that burst in ten seconds and then measure the limiter.
        ("WALLET_RATE_LIMIT_SANDBOX", "1000000".into()),
    ])
}

/// `(name, value)` pairs as owned strings, the shape `Process::start` takes.
pub fn env_of(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Replaces (or adds) `name` in `env`.
pub fn set_env(env: &mut Vec<(String, String)>, name: &str, value: String) {
    env.retain(|(k, _)| k != name);
    env.push((name.to_string(), value));
}

/// Runs `wallet-api args` with exactly `env` (plus PATH); fails unless it succeeds, and
/// returns its output parsed as JSON (Null when it printed none).
pub fn run_cli(args: &[&str], env: &[(String, String)]) -> Value {
    let out = cli(args, env);
    assert!(
        out.status.success(),
        "wallet-api {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// Runs `wallet-api args` with exactly `env` (plus PATH).
pub fn cli(args: &[&str], env: &[(String, String)]) -> std::process::Output {
    std::process::Command::new(binary("wallet-api"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("wallet-api runs")
}

/// The service as production runs it: `wallet-api` replicas and a `wallet-worker`, separate
/// processes started with `env`, their logs in `dir`.
pub struct Service {
    pub apis: Vec<Process>,
    pub api_ports: Vec<u16>,
    pub worker: Process,
}

impl Service {
    /// Migrates, then starts `replicas` API processes and one worker, and waits until every
    /// API listens.
    pub fn start(env: &[(String, String)], dir: &std::path::Path, replicas: usize) -> Service {
        run_cli(&["migrate"], env);
        let mut api_ports = Vec::new();
        let mut apis = Vec::new();
        for i in 0..replicas {
            let port = free_port();
            let mut e = env.to_vec();
            set_env(&mut e, "WALLET_LISTEN_ADDR", format!("127.0.0.1:{port}"));
            set_env(&mut e, "WALLET_METRICS_LISTEN_ADDR", "127.0.0.1:0".into());
            apis.push(Process::start(
                "wallet-api",
                &["serve"],
                &e,
                &dir.join(format!("api-{i}.log")),
            ));
            api_ports.push(port);
        }
        let mut e = env.to_vec();
        set_env(
            &mut e,
            "WALLET_METRICS_LISTEN_ADDR",
            format!("127.0.0.1:{}", free_port()),
        );
        let worker = Process::start("wallet-worker", &["run"], &e, &dir.join("worker.log"));
        for p in &api_ports {
            wait_for_port(*p, Duration::from_secs(60));
        }
        Service {
            apis,
            api_ports,
            worker,
        }
    }

    /// The base URL of every replica.
    pub fn urls(&self) -> Vec<String> {
        self.api_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}/v1"))
            .collect()
    }
}
