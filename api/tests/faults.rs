//! The fault suite: the service as production runs it (two `wallet-api` replicas and a
//! `wallet-worker`, separate processes, on a PostgreSQL cluster of the suite's own and a
//! Redis, each behind a proxy the suite can cut or black-hole) under paying load, while
//! the suite SIGKILLs the API and the worker, cuts and black-holes PostgreSQL and Redis, and
//! crashes PostgreSQL (`pg_ctl stop -m immediate`). Clients retry each payment with its
//! Idempotency-Key until a definitive answer. Then:
//!
//! - every acknowledged payment exists once, and nothing exists that was not acknowledged;
//! - every balance is its funding minus its acknowledged debits;
//! - `wallet-api ledger check` passes;
//! - every committed event reached the webhook receiver at least once.
//!
//! `FAULT_SECS` (default 60) is how long the faults go on: CI runs the default, a long run
//! by hand sets it (see the README). Production mode only.
use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use serde_json::{Value, json};
use tests::{
    Mode,
    cluster::PrivateCluster,
    mode,
    procs::{Process, binary, free_port, wait_for_port},
    proxy::Proxy,
    redis_server::PrivateRedis,
    webhooks::Receiver,
};
use uuid::Uuid;

const FUNDING: i64 = 1_000_000;
const CLIENTS: usize = 8;
const JWT_SECRET: &str = "fault-suite-jwt-secret-0123456789abcdef";
const SEALING_KEY: &str = "fault-suite-sealing-key-0123456789abcdef";

fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What the suite counts; printed at the end (the figures of the closing note).
#[derive(Default, Debug)]
struct Counts {
    api_kills: AtomicU64,
    worker_kills: AtomicU64,
    pg_cuts: AtomicU64,
    pg_black_holes: AtomicU64,
    pg_crashes: AtomicU64,
    redis_cuts: AtomicU64,
    redis_black_holes: AtomicU64,
}

/// One payment's story as its client saw it.
#[derive(Clone, Debug)]
struct Outcome {
    key: String,
    wallet: String,
    amount: i64,
    /// The definitive answer's status (200: acknowledged).
    status: u16,
    payment_id: Option<String>,
    took: Duration,
    /// Whether an attempt lost its connection (a replica killed under it).
    saw_transport_error: bool,
}

struct Rig {
    dir: PathBuf,
    cluster: PrivateCluster,
    _redis: PrivateRedis,
    pg: Proxy,
    redis: Proxy,
    apis: Vec<Process>,
    api_ports: Vec<u16>,
    worker: Process,
    env: Vec<(String, String)>,
}

fn env_of(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn run_cli(args: &[&str], env: &[(String, String)]) -> Value {
    let out = std::process::Command::new(binary("wallet-api"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("wallet-api runs");
    assert!(
        out.status.success(),
        "wallet-api {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

impl Rig {
    async fn start() -> Rig {
        let cluster = PrivateCluster::start();
        let dir = cluster.dir().join("rig");
        std::fs::create_dir_all(&dir).unwrap();
        let redis = PrivateRedis::start();
        let pg = Proxy::start(format!("127.0.0.1:{}", cluster.port).parse().unwrap()).await;
        let redis_proxy = Proxy::start(format!("127.0.0.1:{}", redis.port).parse().unwrap()).await;
        let env = env_of(&[
            (
                "WALLET_DATABASE_URL",
                format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port),
            ),
            (
                "WALLET_REDIS_URL",
                format!("redis://127.0.0.1:{}", redis_proxy.port),
            ),
            ("WALLET_JWT_SECRET", JWT_SECRET.into()),
            ("WALLET_SECRET_KEY", SEALING_KEY.into()),
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
        ]);
        run_cli(&["migrate"], &env);
        let mut api_ports = Vec::new();
        let mut apis = Vec::new();
        for i in 0..2 {
            let port = free_port();
            let mut e = env.clone();
            e.push(("WALLET_LISTEN_ADDR".into(), format!("127.0.0.1:{port}")));
            e.push(("WALLET_METRICS_LISTEN_ADDR".into(), "127.0.0.1:0".into()));
            apis.push(Process::start(
                "wallet-api",
                &["serve"],
                &e,
                &dir.join(format!("api-{i}.log")),
            ));
            api_ports.push(port);
        }
        let mut e = env.clone();
        e.push((
            "WALLET_METRICS_LISTEN_ADDR".into(),
            format!("127.0.0.1:{}", free_port()),
        ));
        let worker = Process::start("wallet-worker", &["run"], &e, &dir.join("worker.log"));
        for p in &api_ports {
            wait_for_port(*p, Duration::from_secs(60));
        }
        Rig {
            dir,
            cluster,
            _redis: redis,
            pg,
            redis: redis_proxy,
            apis,
            api_ports,
            worker,
            env,
        }
    }

    fn url(&self, replica: usize) -> String {
        format!(
            "http://127.0.0.1:{}/v1",
            self.api_ports[replica % self.api_ports.len()]
        )
    }

    /// The database as the suite's checks read it (not through the proxy).
    fn direct_url(&self) -> String {
        self.cluster.url("postgres")
    }
}

/// A tenant, an operator, a subscribed receiver and funded customers.
struct Merchant {
    merchant_id: String,
    platform_key: String,
    operator_key: String,
    token: RwLock<String>,
    /// (phone, wallet_id) per client.
    customers: Vec<(String, String)>,
}

fn envelope(merchant: &str) -> Value {
    json!({
        "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
        "context": {"merchant_id": merchant, "terminal_id": "till-faults"},
    })
}

fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// Sends until an answer that is not a retryable failure (transport error, 5xx, 409 in
/// progress, 429), alternating replicas. Returns the answer and whether a transport error
/// was seen.
async fn until_definitive(
    client: &reqwest::Client,
    rig_urls: &[String],
    build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
) -> (u16, Value, bool) {
    let mut transport = false;
    for attempt in 0usize.. {
        let base = &rig_urls[attempt % rig_urls.len()];
        match build(client, base).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let body: Value = r.json().await.unwrap_or(Value::Null);
                if !(status >= 500 || status == 409 || status == 429) {
                    return (status, body, transport);
                }
            }
            Err(_) => transport = true,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(attempt < 3_000, "no definitive answer after 3000 attempts");
    }
    unreachable!("the loop returns or panics")
}

async fn setup(rig: &Rig, receiver: &Receiver) -> Merchant {
    let tenant = run_cli(
        &[
            "tenant",
            "create",
            "--name",
            "Faults",
            "--sandbox",
            "--json",
        ],
        &rig.env,
    );
    let operator = run_cli(
        &["operator", "create", "--name", "faults", "--json"],
        &rig.env,
    );
    let merchant_id = tenant["merchant_id"].as_str().unwrap().to_string();
    let platform_key = tenant["platform_key"].as_str().unwrap().to_string();
    let operator_key = operator["operator_key"].as_str().unwrap().to_string();
    let client = reqwest::Client::new();
    let urls = vec![rig.url(0), rig.url(1)];
    let key = Uuid::new_v4().to_string();
    let (s, b, _) = until_definitive(&client, &urls, |c, base| {
        c.post(format!("{base}/webhooks/subscriptions"))
            .header("x-api-key", &platform_key)
            .header("Idempotency-Key", &key)
            .json(&with(
                envelope(&merchant_id),
                json!({"url": receiver.url, "event_types": ["payment.completed", "wallet.balance_changed"]}),
            ))
    })
    .await;
    assert_eq!(s, 200, "{b}");
    let m = Merchant {
        token: RwLock::new(String::new()),
        merchant_id,
        platform_key,
        operator_key,
        customers: Vec::new(),
    };
    refresh_token(&m, &client, &urls).await;
    let mut customers = Vec::new();
    for _ in 0..CLIENTS {
        let phone = tests::shop::random_phone();
        let key = Uuid::new_v4().to_string();
        let (s, b, _) = until_definitive(&client, &urls, |c, base| {
            c.post(format!("{base}/operator/wallets"))
                .header("x-operator-key", &m.operator_key)
                .header("Idempotency-Key", &key)
                .json(&json!({"merchant_id": m.merchant_id, "phone": phone, "state": "VERIFIED", "reason": "fault suite"}))
        })
        .await;
        assert_eq!(s, 200, "{b}");
        let wallet = b["data"]["wallet_id"].as_str().unwrap().to_string();
        let key = Uuid::new_v4().to_string();
        let (s, b, _) = until_definitive(&client, &urls, |c, base| {
            c.post(format!("{base}/operator/wallets/{wallet}/adjustments"))
                .header("x-operator-key", &m.operator_key)
                .header("Idempotency-Key", &key)
                .json(&json!({"direction": "credit", "amount_minor": FUNDING, "currency": "EUR", "reason": "fault suite"}))
        })
        .await;
        assert_eq!(s, 200, "{b}");
        customers.push((phone, wallet));
    }
    Merchant { customers, ..m }
}

async fn refresh_token(m: &Merchant, client: &reqwest::Client, urls: &[String]) {
    let key = Uuid::new_v4().to_string();
    let (s, b, _) = until_definitive(client, urls, |c, base| {
        c.post(format!("{base}/auth/token"))
            .header("x-api-key", &m.platform_key)
            .header("Idempotency-Key", &key)
            .json(&envelope(&m.merchant_id))
    })
    .await;
    assert_eq!(s, 200, "{b}");
    *m.token.write().unwrap() = b["data"]["token"].as_str().unwrap().to_string();
}

/// One client: pays from its own wallet until told to stop, each payment retried under its
/// key until a definitive answer.
async fn client_loop(
    m: Arc<Merchant>,
    urls: Vec<String>,
    me: usize,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Outcome>>>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (phone, wallet) = m.customers[me].clone();
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let amount = 1 + ((n * 7919 + me as u64 * 104_729) % 500) as i64;
        let key = Uuid::new_v4().to_string();
        let started = Instant::now();
        let mut transport = false;
        let qr_key = Uuid::new_v4().to_string();
        let qr = loop {
            let token = m.token.read().unwrap().clone();
            let (s, b, t) = until_definitive(&client, &urls, |c, base| {
                c.post(format!("{base}/qr/mint"))
                    .bearer_auth(&token)
                    .header("Idempotency-Key", &qr_key)
                    .json(&with(
                        envelope(&m.merchant_id),
                        json!({"customer": {"credential_type": "phone", "phone": phone}}),
                    ))
            })
            .await;
            transport |= t;
            match s {
                200 => break b["data"]["qr_payload"].as_str().unwrap().to_string(),
                401 => refresh_token(&m, &client, &urls).await,
                _ => panic!("QR mint answered {s}: {b}"),
            }
        };
        let (status, body) = loop {
            let token = m.token.read().unwrap().clone();
            let (s, b, t) = until_definitive(&client, &urls, |c, base| {
                c.post(format!("{base}/payments"))
                    .bearer_auth(&token)
                    .header("Idempotency-Key", &key)
                    .json(&with(
                        envelope(&m.merchant_id),
                        json!({"credential": {"type": "qr", "qr_payload": qr},
                               "amount_minor": amount, "currency": "EUR", "order_ref": key}),
                    ))
            })
            .await;
            transport |= t;
            if s == 401 {
                refresh_token(&m, &client, &urls).await;
                continue;
            }
            break (s, b);
        };
        out.lock().unwrap().push(Outcome {
            key,
            wallet: wallet.clone(),
            amount,
            status,
            payment_id: body["data"]["payment_id"].as_str().map(str::to_string),
            took: started.elapsed(),
            saw_transport_error: transport,
        });
    }
}

/// The faults, one after another, until `secs` have passed.
async fn chaos(rig: &mut Rig, secs: u64, counts: &Counts) {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut step = 0usize;
    while Instant::now() < until {
        match step % 7 {
            0 | 4 => {
                let i = step % rig.apis.len();
                rig.apis[i].kill();
                counts.api_kills.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
                rig.apis[i].restart();
                let port = rig.api_ports[i];
                tokio::task::block_in_place(|| wait_for_port(port, Duration::from_secs(60)));
            }
            1 => {
                rig.worker.kill();
                counts.worker_kills.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
                rig.worker.restart();
            }
            2 => {
                rig.pg.cut();
                counts.pg_cuts.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(2)).await;
                rig.pg.heal();
            }
            3 => {
                if step % 2 == 1 {
                    rig.pg.black_hole();
                    counts.pg_black_holes.fetch_add(1, Ordering::Relaxed);
                } else {
                    rig.redis.black_hole();
                    counts.redis_black_holes.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
                rig.pg.heal();
                rig.redis.heal();
            }
            5 => {
                rig.redis.cut();
                counts.redis_cuts.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(2)).await;
                rig.redis.heal();
            }
            _ => {
                tokio::task::block_in_place(|| rig.cluster.stop_immediate());
                counts.pg_crashes.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
                tokio::task::block_in_place(|| rig.cluster.start_server());
            }
        }
        step += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn rows(db: &sea_orm::DatabaseConnection, sql: &str) -> Vec<sea_orm::QueryResult> {
    db.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .expect("query")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_kills_and_outages_every_acknowledged_payment_exists_once_and_nothing_else() {
    if mode() != Mode::Production {
        eprintln!("production mode only: the fault suite runs the service as separate processes");
        return;
    }
    install_tls();
    let secs: u64 = std::env::var("FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut rig = Rig::start().await;
    let receiver = Receiver::ok().await;
    let merchant = Arc::new(setup(&rig, &receiver).await);
    let urls = vec![rig.url(0), rig.url(1)];
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|me| {
            tokio::spawn(client_loop(
                merchant.clone(),
                urls.clone(),
                me,
                stop.clone(),
                outcomes.clone(),
            ))
        })
        .collect();
    let counts = Counts::default();
    let started = Instant::now();
    chaos(&mut rig, secs, &counts).await;
    rig.pg.heal();
    rig.redis.heal();
    // A little load on the healed service, then every client finishes its payment.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("client task");
    }
    let load_secs = started.elapsed().as_secs_f64();
    let outcomes = outcomes.lock().unwrap().clone();

    let db = Database::connect(rig.direct_url())
        .await
        .expect("direct connection");
    // Every acknowledged payment exists once; nothing else exists.
    let stored = rows(
        &db,
        &format!(
            "SELECT order_ref, id::text AS id, amount_minor, wallet_id::text AS wallet FROM payments \
             WHERE merchant_id = '{}'",
            merchant.merchant_id
        ),
    )
    .await;
    let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
    for r in &stored {
        let key: String = r.try_get("", "order_ref").unwrap();
        let id: String = r.try_get("", "id").unwrap();
        by_key.entry(key).or_default().push(id);
    }
    let acked: Vec<&Outcome> = outcomes.iter().filter(|o| o.status == 200).collect();
    let refused: Vec<&Outcome> = outcomes.iter().filter(|o| o.status != 200).collect();
    let duplicates = by_key.values().filter(|ids| ids.len() > 1).count();
    let lost: Vec<&&Outcome> = acked
        .iter()
        .filter(|o| {
            by_key.get(&o.key).map(|ids| ids.as_slice())
                != Some(&[o.payment_id.clone().unwrap()][..])
        })
        .collect();
    let acked_keys: HashSet<&str> = acked.iter().map(|o| o.key.as_str()).collect();
    let phantoms = by_key
        .keys()
        .filter(|k| !acked_keys.contains(k.as_str()))
        .count();
    // Balances: funding minus acknowledged debits.
    let mut wrong_balances = Vec::new();
    for (_, wallet) in &merchant.customers {
        let debited: i64 = acked
            .iter()
            .filter(|o| &o.wallet == wallet)
            .map(|o| o.amount)
            .sum();
        let r = rows(
            &db,
            &format!("SELECT actual_minor FROM wallets WHERE id = '{wallet}'"),
        )
        .await;
        let actual: i64 = r[0].try_get("", "actual_minor").unwrap();
        if actual != FUNDING - debited {
            wrong_balances.push((wallet.clone(), actual, FUNDING - debited));
        }
    }
    // The ledger check, as an operator runs it.
    let mut direct_env = rig.env.clone();
    direct_env.retain(|(k, _)| k != "WALLET_DATABASE_URL");
    direct_env.push(("WALLET_DATABASE_URL".into(), rig.direct_url()));
    let ledger = std::process::Command::new(binary("wallet-api"))
        .args(["ledger", "check", "--merchant", &merchant.merchant_id])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(direct_env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("ledger check runs");
    // Every committed event of the subscribed types reached the receiver.
    let events = rows(
        &db,
        &format!(
            "SELECT event_id::text AS id, created_at FROM outbox WHERE kind = 'event' \
             AND topic IN ('payment.completed', 'wallet.balance_changed') AND merchant_id = '{}'",
            merchant.merchant_id
        ),
    )
    .await;
    let committed: HashMap<String, chrono::DateTime<chrono::Utc>> = events
        .iter()
        .map(|r| {
            (
                r.try_get("", "id").unwrap(),
                r.try_get("", "created_at").unwrap(),
            )
        })
        .collect();
    let drained = Instant::now();
    loop {
        let got = receiver.accepted_event_ids();
        let missing = committed.keys().filter(|id| !got.contains(*id)).count();
        if missing == 0 {
            break;
        }
        assert!(
            drained.elapsed() < Duration::from_secs(180),
            "{missing} of {} committed events never reached the receiver",
            committed.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut first_seen: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
    for r in receiver.received().iter().filter(|r| r.answered == 200) {
        first_seen.entry(r.event_id()).or_insert(r.at);
    }
    let longest_delivery = committed
        .iter()
        .filter_map(|(id, created)| {
            first_seen
                .get(id)
                .map(|at| (*at - *created).num_milliseconds())
        })
        .max()
        .unwrap_or(0);
    let longest_crash_retry = outcomes
        .iter()
        .filter(|o| o.saw_transport_error)
        .map(|o| o.took)
        .max()
        .unwrap_or_default();
    let longest_retry = outcomes.iter().map(|o| o.took).max().unwrap_or_default();
    let report = json!({
        "fault_secs": secs,
        "load_secs": load_secs,
        "api_kills": counts.api_kills.load(Ordering::Relaxed),
        "worker_kills": counts.worker_kills.load(Ordering::Relaxed),
        "pg_cuts": counts.pg_cuts.load(Ordering::Relaxed),
        "pg_black_holes": counts.pg_black_holes.load(Ordering::Relaxed),
        "pg_crashes": counts.pg_crashes.load(Ordering::Relaxed),
        "redis_cuts": counts.redis_cuts.load(Ordering::Relaxed),
        "redis_black_holes": counts.redis_black_holes.load(Ordering::Relaxed),
        "acknowledged_payments": acked.len(),
        "refused_payments": refused.len(),
        "duplicates": duplicates,
        "lost": lost.len(),
        "phantoms": phantoms,
        "wrong_balances": wrong_balances.len(),
        "committed_events": committed.len(),
        "longest_payment_ms": longest_retry.as_millis() as u64,
        "longest_payment_after_a_lost_connection_ms": longest_crash_retry.as_millis() as u64,
        "longest_event_delivery_ms": longest_delivery,
    });
    eprintln!("fault suite: {report:#}");
    let _ = std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("fault-suite-report.json"),
        format!("{report:#}\n"),
    );
    assert!(acked.len() > 50, "too little load got through: {report}");
    assert!(
        refused.is_empty(),
        "payments refused: {:?}",
        refused.iter().map(|o| o.status).collect::<Vec<_>>()
    );
    assert_eq!(duplicates, 0, "{report}");
    assert!(
        lost.is_empty(),
        "acknowledged but not stored once: {:?}",
        lost.iter().map(|o| &o.key).collect::<Vec<_>>()
    );
    assert_eq!(phantoms, 0, "stored but never acknowledged: {report}");
    assert!(wrong_balances.is_empty(), "{wrong_balances:?}");
    assert!(
        ledger.status.success(),
        "ledger check: {}{}",
        String::from_utf8_lossy(&ledger.stdout),
        String::from_utf8_lossy(&ledger.stderr)
    );
    if std::env::var("KEEP_FAULT_DIRS").is_ok() {
        eprintln!("logs kept in {}", rig.dir.display());
    }
}
