//! The HA drills (docs/operations/ha.md), run by `tests/ha/drill.sh` against the rig
//! `tests/ha/up.sh` starts: two PostgreSQL nodes under Patroni behind HAProxy, and a Redis
//! Cluster with a replica per master. The service runs as production runs it (two
//! `wallet-api` replicas and a `wallet-worker`) under eight paying clients that retry each
//! payment under its Idempotency-Key until a definitive answer, as in the fault suite.
//!
//! - The primary's machine dies (`tests/ha/kill-primary.sh`: SIGKILL to its Patroni and
//!   every PostgreSQL process); Patroni promotes the replica and HAProxy follows it.
//! - A Redis master dies (SIGKILL); its replica takes over its slots.
//!
//! Then the audit of the fault suite: every acknowledged payment exists exactly once and
//! nothing else, balances are funding minus acknowledged debits, `wallet-api ledger check`
//! passes on the new primary, every committed event reached the webhook receiver. Each
//! drill prints one line the docs quote, and appends its figures to
//! `$WALLET_HA_STATE/drills.jsonl`.
//!
//! A point-in-time restore is drilled the same way (`tests/ha/pitr.sh`): a backup while the
//! clients pay, a new cluster restored to an instant, and the payments in it checked.
//!
//! Without the rig's environment (`WALLET_HA_DATABASE_URL`, ...) each test says so and
//! does nothing: `cargo test --workspace` does not start an HA rig.
use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;
use tests::{
    paying::{Audit, Load, Merchant, Outcome, Service, fault_env, set_env},
    webhooks::Receiver,
};

mod pitr;
mod primary;
mod redis_master;

const CLIENTS: usize = 8;

/// The rig's settings, from `$WALLET_HA_STATE/env`; None when no rig runs.
struct Rig {
    state: PathBuf,
    database_url: String,
    replica_url: String,
    redis_url: String,
    sync: String,
}

impl Rig {
    /// The rig `runner` starts, or None (said on stderr) when none runs.
    fn from_env(runner: &str) -> Option<Rig> {
        let rig = Self::read();
        if rig.is_none() {
            eprintln!("no HA rig: {runner} runs this drill");
        }
        rig
    }

    fn read() -> Option<Rig> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Some(Rig {
            state: var("WALLET_HA_STATE")?.into(),
            database_url: var("WALLET_HA_DATABASE_URL")?,
            replica_url: var("WALLET_HA_REPLICA_URL")?,
            redis_url: var("WALLET_HA_REDIS_URL")?,
            sync: var("WALLET_HA_SYNC").unwrap_or_else(|| "on".into()),
        })
    }

    /// The service's settings on this rig; its data and logs under `dir`.
    fn env(&self, dir: &Path) -> Vec<(String, String)> {
        let mut env = fault_env(self.database_url.clone(), self.redis_url.clone(), dir);
        set_env(&mut env, "WALLET_REDIS_MODE", "cluster".into());
        // The feeds read the replicas (HAProxy's read-only port); while a failover leaves
        // none, they fall back to the primary.
        set_env(
            &mut env,
            "WALLET_DATABASE_REPLICA_URL",
            self.replica_url.clone(),
        );
        env
    }

    /// A directory for this drill's logs.
    fn dir(&self, drill: &str) -> PathBuf {
        let dir = self
            .state
            .join("drills")
            .join(format!("{drill}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Prints a drill's figures and its line, and appends the figures to `drills.jsonl`,
    /// where drill.sh reads them.
    fn record(&self, figures: &Value) {
        eprintln!("{figures:#}");
        eprintln!("{}", figures["line"].as_str().unwrap_or_default());
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.join("drills.jsonl"))
            .expect("drills.jsonl");
        writeln!(f, "{figures}").unwrap();
    }
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `tests/ha/<name>` with `args`; fails unless it succeeds; its last stdout line as
/// JSON.
fn run_script(rig: &Rig, name: &str, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/ha")
        .join(name);
    let out = tokio::task::block_in_place(|| {
        Command::new("bash")
            .arg(script)
            .args(args)
            .env("WALLET_HA_STATE", &rig.state)
            .output()
            .expect("the script runs")
    });
    assert!(
        out.status.success(),
        "{name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("null")).expect("a JSON line")
}

/// The instant `at_ms` (Unix milliseconds) on the monotonic clock.
fn instant_of(at_ms: u64) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    Instant::now() - Duration::from_millis(now_ms.saturating_sub(at_ms))
}

/// How long after `at` the first payment begun after it was acknowledged: when the
/// service took payments again.
fn first_payment_after(outcomes: &[Outcome], at: Instant) -> Option<Duration> {
    outcomes
        .iter()
        .filter(|o| o.status == 200 && o.started >= at)
        .map(|o| o.finished - at)
        .min()
}

/// Lets the load run until `total` has passed since `started`, and at least `after` since a
/// payment begun after `at` was acknowledged (or `give_up` after `at`, when none ever is).
async fn run_on(load: &Load, started: Instant, total: Duration, at: Instant) {
    let give_up = at + Duration::from_secs(120);
    loop {
        let resumed = first_payment_after(&load.outcomes.lock().unwrap(), at).map(|d| at + d);
        let enough_after = resumed.is_some_and(|r| r.elapsed() >= Duration::from_secs(5));
        if (started.elapsed() >= total && enough_after) || Instant::now() > give_up {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Payments acknowledged per second in the window `[from, to)`.
fn rate(outcomes: &[Outcome], from: Instant, to: Instant) -> f64 {
    let n = outcomes
        .iter()
        .filter(|o| o.status == 200 && o.finished >= from && o.finished < to)
        .count();
    let secs = (to - from).as_secs_f64();
    if secs > 0.0 {
        (n as f64 / secs * 10.0).round() / 10.0
    } else {
        0.0
    }
}

/// The service on the rig (two API replicas and a worker) under eight paying clients:
/// where every drill starts.
struct Paying {
    env: Vec<(String, String)>,
    // Its processes live until the drill ends (the worker delivers the events audited).
    _service: Service,
    receiver: Receiver,
    merchant: Arc<Merchant>,
    load: Load,
    started: Instant,
}

impl Paying {
    async fn start(rig: &Rig, drill: &str) -> Paying {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = rig.dir(drill);
        let env = rig.env(&dir);
        let service = Service::start(&env, &dir, 2);
        let urls = service.urls();
        let receiver = Receiver::ok().await;
        let merchant = Arc::new(Merchant::open(&env, &urls, &receiver, CLIENTS).await);
        let load = Load::start(&merchant, &urls);
        Paying {
            env,
            _service: service,
            receiver,
            merchant,
            load,
            started: Instant::now(),
        }
    }

    /// Stops the clients, lets each finish its payment, and audits what they were told
    /// against the database at `url`.
    async fn audit(self, url: &str) -> (Vec<Outcome>, Audit) {
        let outcomes = self.load.finish().await;
        let audit = Audit::run(
            url,
            &self.env,
            &self.merchant,
            &outcomes,
            &self.receiver,
            Duration::from_secs(120),
        )
        .await;
        (outcomes, audit)
    }
}
