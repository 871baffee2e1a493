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
//! Without the rig's environment (`WALLET_HA_DATABASE_URL`, ...) each test says so and
//! does nothing: `cargo test --workspace` does not start an HA rig.
use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::{Value, json};
use tests::{
    paying::{Audit, Load, Merchant, Outcome, Service, fault_env, set_env},
    webhooks::Receiver,
};

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
    fn from_env() -> Option<Rig> {
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

    /// Appends a drill's figures to `drills.jsonl`, where drill.sh reads them.
    fn record(&self, figures: &Value) {
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

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/ha")
        .join(name)
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

fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_primarys_machine_dies_the_replica_takes_over_and_no_acknowledged_payment_is_lost()
{
    let Some(rig) = Rig::from_env() else {
        eprintln!("no HA rig: tests/ha/drill.sh runs this drill");
        return;
    };
    install_tls();
    let secs = setting("HA_DRILL_SECS", 30);
    let stall_ms = setting("HA_STALL_MS", 1000);
    let dir = rig.dir("failover");
    let env = rig.env(&dir);
    let service = Service::start(&env, &dir, 2);
    let urls = service.urls();
    let receiver = Receiver::ok().await;
    let merchant = Arc::new(Merchant::open(&env, &urls, &receiver, CLIENTS).await);
    let load = Load::start(&merchant, &urls);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs / 3)).await;

    let out = tokio::task::block_in_place(|| {
        Command::new("bash")
            .arg(script("kill-primary.sh"))
            .arg(stall_ms.to_string())
            .env("WALLET_HA_STATE", &rig.state)
            .output()
            .expect("kill-primary.sh runs")
    });
    assert!(
        out.status.success(),
        "kill-primary.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let killed: Value = serde_json::from_slice(&out.stdout).expect("its JSON line");
    let at = instant_of(killed["at_ms"].as_u64().unwrap());
    let acknowledged_before_kill = load
        .outcomes
        .lock()
        .unwrap()
        .iter()
        .filter(|o| o.status == 200 && o.finished < at)
        .count();
    run_on(&load, started, Duration::from_secs(secs), at).await;
    let ended = Instant::now();
    let outcomes = load.finish().await;
    let load_secs = started.elapsed().as_secs_f64();

    // Through HAProxy's read-write port: the new primary.
    let audit = Audit::run(
        &rig.database_url,
        &env,
        &merchant,
        &outcomes,
        &receiver,
        Duration::from_secs(120),
    )
    .await;
    let resumed = first_payment_after(&outcomes, at);
    let line = format!(
        "failover: lost {}, duplicated {}, first payment after kill {}, longest retry {:.1}s",
        audit.lost.len(),
        audit.duplicates + audit.phantoms,
        resumed.map_or("never".into(), |d| format!("{:.1}s", d.as_secs_f64())),
        audit.longest_payment.as_secs_f64(),
    );
    let mut figures = json!({
        "drill": "failover",
        "line": line,
        "synchronous_mode": rig.sync,
        "killed": killed["killed"],
        "replication_stalled_ms": stall_ms,
        "load_secs": load_secs,
        "acknowledged_before_kill": acknowledged_before_kill,
        "first_payment_after_kill_ms": resumed.map(|d| d.as_millis() as u64),
        "payments_per_sec_before_kill": rate(&outcomes, started, at),
        "payments_per_sec_after_resuming": resumed.map(|d| rate(&outcomes, at + d, ended)),
    });
    for (k, v) in audit.figures().as_object().unwrap() {
        figures[k] = v.clone();
    }
    eprintln!("{figures:#}");
    eprintln!("{line}");
    rig.record(&figures);
    assert!(resumed.is_some(), "no payment was taken after the kill");
    audit.assert_money_held(20);
}

/// `redis-cli -p port args...`, its output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The port of the live master serving `key`, asked of the first of `nodes` that answers.
fn master_of(nodes: &[u16], key: &str) -> u16 {
    let (node, slot) = nodes
        .iter()
        .find_map(|n| {
            let slot = redis_cli(*n, &["cluster", "keyslot", key])
                .parse::<u16>()
                .ok()?;
            Some((*n, slot))
        })
        .expect("a Redis node answers");
    for line in redis_cli(node, &["cluster", "nodes"]).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        let serves = f[8..].iter().any(|range| {
            let mut ends = range
                .split('-')
                .map(|n| n.parse::<u16>().unwrap_or(u16::MAX));
            let lo = ends.next().unwrap_or(u16::MAX);
            let hi = ends.next().unwrap_or(lo);
            (lo..=hi).contains(&slot)
        });
        if serves {
            let addr = f[1].split('@').next().unwrap();
            return addr.rsplit(':').next().unwrap().parse().unwrap();
        }
    }
    panic!("no live master serves slot {slot}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_redis_master_dies_under_load_its_replica_takes_over_and_nothing_is_lost() {
    let Some(rig) = Rig::from_env() else {
        eprintln!("no HA rig: tests/ha/drill.sh runs this drill");
        return;
    };
    install_tls();
    let secs = setting("HA_DRILL_SECS", 30);
    let dir = rig.dir("redis");
    let env = rig.env(&dir);
    let service = Service::start(&env, &dir, 2);
    let urls = service.urls();
    let receiver = Receiver::ok().await;
    let merchant = Arc::new(Merchant::open(&env, &urls, &receiver, CLIENTS).await);
    let load = Load::start(&merchant, &urls);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs / 3)).await;

    // The master holding the integration's standing, which every terminal request reads:
    // while it is down, every payment of this tenant is refused.
    let nodes: Vec<u16> = rig
        .redis_url
        .split(',')
        .filter_map(|u| u.rsplit(':').next()?.parse().ok())
        .collect();
    let prefix = env
        .iter()
        .find(|(k, _)| k == "WALLET_REDIS_PREFIX")
        .map_or_else(
            || api::config::Config::default().redis_prefix,
            |(_, v)| v.clone(),
        );
    let standing = format!(
        "{prefix}{}",
        api::domain::credentials::standing::entry(merchant.integration_id.parse().unwrap())
    );
    let victim = master_of(&nodes, &standing);
    let pid = std::fs::read_to_string(rig.state.join(format!("redis/{victim}/redis.pid")))
        .expect("the master's pid file");
    let at = Instant::now();
    let killed = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let acknowledged_before_kill = load.acknowledged();
    run_on(&load, started, Duration::from_secs(secs), at).await;
    let refusals: Vec<(Instant, u16)> = load
        .refusals
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t >= at)
        .copied()
        .collect();
    let outcomes = load.finish().await;
    let audit = Audit::run(
        &rig.database_url,
        &env,
        &merchant,
        &outcomes,
        &receiver,
        Duration::from_secs(120),
    )
    .await;
    let refused_for = refusals
        .iter()
        .map(|(t, _)| *t - at)
        .max()
        .unwrap_or_default();
    let resumed = first_payment_after(&outcomes, at);
    let mut by_status = std::collections::BTreeMap::<String, u64>::new();
    for (_, s) in &refusals {
        *by_status.entry(s.to_string()).or_default() += 1;
    }
    // A retryable refusal is 503 (Redis or a dependency unavailable), 409 (the same key in
    // progress) or 429; 0 is a transport error, 500 a failure nobody planned for.
    let unplanned = refusals
        .iter()
        .filter(|(_, s)| ![503, 409, 429].contains(s))
        .count();
    let new_master = master_of(&nodes, &standing);
    let line = format!(
        "redis failover: lost {}, duplicated {}, retryable 503s for {:.1}s ({} answers), payments resumed {} after the kill, no operator action",
        audit.lost.len(),
        audit.duplicates + audit.phantoms,
        refused_for.as_secs_f64(),
        refusals.len(),
        resumed.map_or("never".into(), |d| format!("{:.1}s", d.as_secs_f64())),
    );
    let mut figures = json!({
        "drill": "redis",
        "line": line,
        "killed_master": victim,
        "new_master": new_master,
        "acknowledged_before_kill": acknowledged_before_kill,
        "retryable_answers": refusals.len(),
        "retryable_answers_by_status": by_status,
        "refused_for_ms": refused_for.as_millis() as u64,
        "first_payment_after_kill_ms": resumed.map(|d| d.as_millis() as u64),
    });
    for (k, v) in audit.figures().as_object().unwrap() {
        figures[k] = v.clone();
    }
    eprintln!("{figures:#}");
    eprintln!("{line}");
    rig.record(&figures);
    assert_ne!(new_master, victim, "a replica took the dead master's slots");
    assert_eq!(
        unplanned, 0,
        "while the master was down every refusal was a retryable answer: {figures}"
    );
    assert!(resumed.is_some(), "no payment was taken after the kill");
    audit.assert_money_held(20);
}

/// Runs a script of tests/ha with `args`; fails unless it succeeds; its last stdout line
/// as JSON.
fn run_script(rig: &Rig, name: &str, args: &[&str]) -> Value {
    let out = tokio::task::block_in_place(|| {
        Command::new("bash")
            .arg(script(name))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_to_an_instant_holds_every_payment_acknowledged_before_it_and_none_begun_after() {
    let Some(rig) = Rig::from_env() else {
        eprintln!("no HA rig: tests/ha/pitr.sh runs this drill");
        return;
    };
    install_tls();
    let secs = setting("HA_DRILL_SECS", 30);
    let dir = rig.dir("pitr");
    let env = rig.env(&dir);
    let service = Service::start(&env, &dir, 2);
    let urls = service.urls();
    let receiver = Receiver::ok().await;
    let merchant = Arc::new(Merchant::open(&env, &urls, &receiver, CLIENTS).await);
    let load = Load::start(&merchant, &urls);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A full backup while the clients pay.
    let backup = run_script(&rig, "backup.sh", &["full"]);
    let paid_during_backup = load.acknowledged();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The instant to restore to, in the database's terms (one clock on this machine).
    // Between two readings of the monotonic clock: a payment acknowledged before the first
    // committed before T, one begun after the second committed after it.
    let just_before = Instant::now();
    let target_wall = chrono::Utc::now();
    let target = Instant::now();
    let rest = Duration::from_secs(secs).saturating_sub(started.elapsed());
    tokio::time::sleep(rest.max(Duration::from_secs(5))).await;
    let outcomes = load.finish().await;

    // The WAL holding commits after the target must be archived before the restore.
    let db = sea_orm::Database::connect(&rig.database_url).await.unwrap();
    let segment: String =
        tests::paying::rows(&db, "SELECT pg_walfile_name(pg_switch_wal()) AS segment").await[0]
            .try_get("", "segment")
            .unwrap();
    tests::eventually(Duration::from_secs(60), "the WAL archived", || async {
        let r = tests::paying::rows(&db, "SELECT last_archived_wal FROM pg_stat_archiver").await;
        let last: Option<String> = r[0].try_get("", "last_archived_wal").unwrap();
        last.filter(|l| l[8..] >= segment[8..]).map(|_| ())
    })
    .await;

    let target_arg = target_wall.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string();
    let restored = run_script(&rig, "restore.sh", &[&target_arg]);
    let restored_url = format!(
        "postgres://postgres@127.0.0.1:{}/wallet",
        restored["port"].as_u64().unwrap()
    );
    let copy = sea_orm::Database::connect(&restored_url).await.unwrap();
    let stored = tests::paying::rows(
        &copy,
        &format!(
            "SELECT order_ref, id::text AS id, wallet_id::text AS wallet, amount_minor FROM payments \
             WHERE merchant_id = '{}'",
            merchant.merchant_id
        ),
    )
    .await;
    let mut present: std::collections::HashMap<String, Vec<String>> = Default::default();
    let mut debited: std::collections::HashMap<String, i64> = Default::default();
    for r in &stored {
        let key: String = r.try_get("", "order_ref").unwrap();
        present
            .entry(key)
            .or_default()
            .push(r.try_get("", "id").unwrap());
        *debited.entry(r.try_get("", "wallet").unwrap()).or_default() +=
            r.try_get::<i64>("", "amount_minor").unwrap();
    }
    let refused: Vec<u16> = outcomes
        .iter()
        .filter(|o| o.status != 200)
        .map(|o| o.status)
        .collect();
    let before: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.status == 200 && o.finished < just_before)
        .collect();
    let after: Vec<&Outcome> = outcomes.iter().filter(|o| o.started > target).collect();
    let in_flight: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.finished >= just_before && o.started <= target)
        .collect();
    // A row is a payment some client was answered for, once, under the id it was given.
    let answered: std::collections::HashMap<&str, &Outcome> =
        outcomes.iter().map(|o| (o.key.as_str(), o)).collect();
    let misplaced = present
        .iter()
        .filter(|(key, ids)| {
            answered
                .get(key.as_str())
                .is_some_and(|o| ids.len() != 1 || o.payment_id.as_deref() != Some(ids[0].as_str()))
        })
        .count();
    let missing_before = before
        .iter()
        .filter(|o| present.get(&o.key) != Some(&vec![o.payment_id.clone().unwrap()]))
        .count();
    let present_after = after
        .iter()
        .filter(|o| present.contains_key(&o.key))
        .count();
    let in_flight_present = in_flight
        .iter()
        .filter(|o| present.contains_key(&o.key))
        .count();
    let known: std::collections::HashSet<&str> = outcomes.iter().map(|o| o.key.as_str()).collect();
    let unknown = present
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .count();
    let mut wrong_balances = Vec::new();
    for (_, wallet) in &merchant.customers {
        let r = tests::paying::rows(
            &copy,
            &format!("SELECT actual_minor FROM wallets WHERE id = '{wallet}'"),
        )
        .await;
        let actual: i64 = r[0].try_get("", "actual_minor").unwrap();
        let expected = tests::paying::FUNDING - debited.get(wallet).copied().unwrap_or(0);
        if actual != expected {
            wrong_balances.push((wallet.clone(), actual, expected));
        }
    }
    let mut copy_env = env.clone();
    set_env(&mut copy_env, "WALLET_DATABASE_URL", restored_url.clone());
    let ledger = tests::paying::cli(&["ledger", "check"], &copy_env);
    let migrate = tests::paying::cli(&["migrate"], &copy_env);
    let migrate_said = String::from_utf8_lossy(&migrate.stderr).trim().to_string();
    let took_ms =
        restored["restore_ms"].as_u64().unwrap() + restored["replay_ms"].as_u64().unwrap();
    let line = format!(
        "pitr: restored to T in {:.1}s; {} acknowledged before T present, {} missing; {} of {} begun after T present; {} of {} in flight at T present",
        took_ms as f64 / 1000.0,
        before.len() - missing_before,
        missing_before,
        present_after,
        after.len(),
        in_flight_present,
        in_flight.len(),
    );
    let figures = json!({
        "drill": "pitr",
        "line": line,
        "target": target_arg,
        "backup": backup,
        "acknowledged_while_backing_up": paid_during_backup,
        "restore_ms": restored["restore_ms"],
        "replay_ms": restored["replay_ms"],
        "acknowledged_before_target": before.len(),
        "missing_before_target": missing_before,
        "begun_after_target": after.len(),
        "present_after_target": present_after,
        "in_flight_at_target": in_flight.len(),
        "in_flight_present": in_flight_present,
        "stored_but_never_sent": unknown,
        "stored_twice_or_under_another_id": misplaced,
        "refused_payments": refused.len(),
        "wrong_balances": wrong_balances.len(),
        "ledger_check_passed": ledger.status.success(),
        "migrate": migrate_said,
    });
    eprintln!("{figures:#}");
    eprintln!("{line}");
    rig.record(&figures);
    assert!(before.len() >= 20, "too little paid before T: {figures}");
    assert!(!after.is_empty(), "nothing paid after T: {figures}");
    assert_eq!(missing_before, 0, "{figures}");
    assert_eq!(present_after, 0, "{figures}");
    assert_eq!(unknown, 0, "{figures}");
    assert!(refused.is_empty(), "payments refused: {refused:?}");
    assert_eq!(misplaced, 0, "{figures}");
    assert!(wrong_balances.is_empty(), "{wrong_balances:?}");
    assert!(
        ledger.status.success(),
        "ledger check on the restored copy: {}{}",
        String::from_utf8_lossy(&ledger.stdout),
        String::from_utf8_lossy(&ledger.stderr)
    );
    assert!(migrate.status.success(), "{migrate_said}");
    assert!(
        migrate_said.contains("migrations applied: 0 of"),
        "the restored schema is current: {migrate_said}"
    );
}
