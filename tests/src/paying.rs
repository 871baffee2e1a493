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
use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::{
    procs::{Process, binary, free_port, wait_for_port},
    webhooks::Receiver,
};

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

/// One payment's story as its client saw it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub key: String,
    pub wallet: String,
    pub amount: i64,
    /// The definitive answer's status (200: acknowledged).
    pub status: u16,
    pub payment_id: Option<String>,
    /// When its first attempt (the QR mint) was sent.
    pub started: Instant,
    /// When the definitive answer came.
    pub finished: Instant,
    /// Whether an attempt lost its connection (a replica killed under it).
    pub saw_transport_error: bool,
}

impl Outcome {
    pub fn took(&self) -> Duration {
        self.finished - self.started
    }
}

/// When a retryable answer (5xx, 409 in progress, 429) or a transport error came, and the
/// status (0 for a transport error).
pub type Refusals = Arc<Mutex<Vec<(Instant, u16)>>>;

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
/// progress, 429), alternating replicas; each retryable one is noted in `refusals`.
/// Returns the answer and whether a transport error was seen.
async fn until_definitive(
    client: &reqwest::Client,
    urls: &[String],
    refusals: Option<&Refusals>,
    build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
) -> (u16, Value, bool) {
    let mut transport = false;
    for attempt in 0usize.. {
        let base = &urls[attempt % urls.len()];
        let refused = match build(client, base).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let body: Value = r.json().await.unwrap_or(Value::Null);
                if !(status >= 500 || status == 409 || status == 429) {
                    return (status, body, transport);
                }
                status
            }
            Err(_) => {
                transport = true;
                0
            }
        };
        if let Some(r) = refusals {
            r.lock().unwrap().push((Instant::now(), refused));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(attempt < 3_000, "no definitive answer after 3000 attempts");
    }
    unreachable!("the loop returns or panics")
}

/// A tenant, an operator, a subscribed receiver and one funded customer per client.
pub struct Merchant {
    pub merchant_id: String,
    pub integration_id: String,
    pub platform_key: String,
    pub operator_key: String,
    token: RwLock<String>,
    /// (phone, wallet_id) per client.
    pub customers: Vec<(String, String)>,
}

impl Merchant {
    /// Onboards a sandbox tenant with `wallet-api` commands run with `env`, subscribes
    /// `receiver` to the payment and balance events, and funds `clients` customers with
    /// [`FUNDING`] each through the service at `urls`.
    pub async fn open(
        env: &[(String, String)],
        urls: &[String],
        receiver: &Receiver,
        clients: usize,
    ) -> Merchant {
        let tenant = run_cli(
            &[
                "tenant",
                "create",
                "--name",
                "Faults",
                "--sandbox",
                "--json",
            ],
            env,
        );
        let operator = run_cli(&["operator", "create", "--name", "faults", "--json"], env);
        let merchant_id = tenant["merchant_id"].as_str().unwrap().to_string();
        let integration_id = tenant["integration_id"].as_str().unwrap().to_string();
        let platform_key = tenant["platform_key"].as_str().unwrap().to_string();
        let operator_key = operator["operator_key"].as_str().unwrap().to_string();
        let client = reqwest::Client::new();
        let key = Uuid::new_v4().to_string();
        let (s, b, _) = until_definitive(&client, urls, None, |c, base| {
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
        let mut m = Merchant {
            token: RwLock::new(String::new()),
            merchant_id,
            integration_id,
            platform_key,
            operator_key,
            customers: Vec::new(),
        };
        m.refresh_token(&client, urls).await;
        for _ in 0..clients {
            let phone = crate::shop::random_phone();
            let key = Uuid::new_v4().to_string();
            let (s, b, _) = until_definitive(&client, urls, None, |c, base| {
                c.post(format!("{base}/operator/wallets"))
                    .header("x-operator-key", &m.operator_key)
                    .header("Idempotency-Key", &key)
                    .json(&json!({"merchant_id": m.merchant_id, "phone": phone, "state": "VERIFIED", "reason": "fault suite"}))
            })
            .await;
            assert_eq!(s, 200, "{b}");
            let wallet = b["data"]["wallet_id"].as_str().unwrap().to_string();
            let key = Uuid::new_v4().to_string();
            let (s, b, _) = until_definitive(&client, urls, None, |c, base| {
                c.post(format!("{base}/operator/wallets/{wallet}/adjustments"))
                    .header("x-operator-key", &m.operator_key)
                    .header("Idempotency-Key", &key)
                    .json(&json!({"direction": "credit", "amount_minor": FUNDING, "currency": "EUR", "reason": "fault suite"}))
            })
            .await;
            assert_eq!(s, 200, "{b}");
            m.customers.push((phone, wallet));
        }
        m
    }

    async fn refresh_token(&self, client: &reqwest::Client, urls: &[String]) {
        let key = Uuid::new_v4().to_string();
        let (s, b, _) = until_definitive(client, urls, None, |c, base| {
            c.post(format!("{base}/auth/token"))
                .header("x-api-key", &self.platform_key)
                .header("Idempotency-Key", &key)
                .json(&envelope(&self.merchant_id))
        })
        .await;
        assert_eq!(s, 200, "{b}");
        *self.token.write().unwrap() = b["data"]["token"].as_str().unwrap().to_string();
    }
}

/// Clients paying, one per customer, until [`Load::finish`].
pub struct Load {
    stop: Arc<AtomicBool>,
    pub outcomes: Arc<Mutex<Vec<Outcome>>>,
    pub refusals: Refusals,
    clients: Vec<JoinHandle<()>>,
}

impl Load {
    pub fn start(merchant: &Arc<Merchant>, urls: &[String]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
        let refusals: Refusals = Arc::default();
        let clients = (0..merchant.customers.len())
            .map(|me| {
                tokio::spawn(client_loop(
                    merchant.clone(),
                    urls.to_vec(),
                    me,
                    stop.clone(),
                    outcomes.clone(),
                    refusals.clone(),
                ))
            })
            .collect();
        Load {
            stop,
            outcomes,
            refusals,
            clients,
        }
    }

    /// The payments acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.outcomes
            .lock()
            .unwrap()
            .iter()
            .filter(|o| o.status == 200)
            .count()
    }

    /// Tells every client to stop, lets each finish its payment, and returns them all.
    pub async fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.await.expect("client task");
        }
        self.outcomes.lock().unwrap().clone()
    }
}

/// One client: pays from its own wallet until told to stop, each payment retried under its
/// key until a definitive answer.
async fn client_loop(
    m: Arc<Merchant>,
    urls: Vec<String>,
    me: usize,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Outcome>>>,
    refusals: Refusals,
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
            let (s, b, t) = until_definitive(&client, &urls, Some(&refusals), |c, base| {
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
                401 => m.refresh_token(&client, &urls).await,
                _ => panic!("QR mint answered {s}: {b}"),
            }
        };
        let (status, body) = loop {
            let token = m.token.read().unwrap().clone();
            let (s, b, t) = until_definitive(&client, &urls, Some(&refusals), |c, base| {
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
                m.refresh_token(&client, &urls).await;
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
            started,
            finished: Instant::now(),
            saw_transport_error: transport,
        });
    }
}

pub async fn rows(db: &sea_orm::DatabaseConnection, sql: &str) -> Vec<sea_orm::QueryResult> {
    db.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .expect("query")
}

/// What the audit found.
#[derive(Debug)]
pub struct Audit {
    pub acknowledged: usize,
    /// Payments whose definitive answer was not 200.
    pub refused: Vec<u16>,
    /// Order refs stored more than once.
    pub duplicates: usize,
    /// Acknowledged payments not stored exactly once under their acknowledged id.
    pub lost: Vec<String>,
    /// Stored payments no client saw acknowledged.
    pub phantoms: usize,
    /// (wallet, stored balance, funding minus acknowledged debits) where they differ.
    pub wrong_balances: Vec<(String, i64, i64)>,
    /// `wallet-api ledger check`'s exit status and output.
    pub ledger_ok: bool,
    pub ledger_output: String,
    pub committed_events: usize,
    /// Committed events the receiver had not accepted when the wait ended.
    pub undelivered: usize,
    pub longest_delivery_ms: i64,
    pub longest_payment: Duration,
    pub longest_payment_after_a_lost_connection: Duration,
}

impl Audit {
    /// Reads the database at `direct_url` (not through any proxy) and runs `wallet-api
    /// ledger check` against it with `env`; waits up to `delivery_wait` for the receiver to
    /// have accepted every committed event.
    pub async fn run(
        direct_url: &str,
        env: &[(String, String)],
        merchant: &Merchant,
        outcomes: &[Outcome],
        receiver: &Receiver,
        delivery_wait: Duration,
    ) -> Audit {
        let db = Database::connect(direct_url)
            .await
            .expect("direct connection");
        let stored = rows(
            &db,
            &format!(
                "SELECT order_ref, id::text AS id FROM payments WHERE merchant_id = '{}'",
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
        let lost = acked
            .iter()
            .filter(|o| {
                by_key.get(&o.key).map(|ids| ids.as_slice())
                    != Some(&[o.payment_id.clone().unwrap()][..])
            })
            .map(|o| o.key.clone())
            .collect();
        let acked_keys: HashSet<&str> = acked.iter().map(|o| o.key.as_str()).collect();
        let phantoms = by_key
            .keys()
            .filter(|k| !acked_keys.contains(k.as_str()))
            .count();
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
        let mut direct_env = env.to_vec();
        set_env(
            &mut direct_env,
            "WALLET_DATABASE_URL",
            direct_url.to_string(),
        );
        let ledger = cli(
            &["ledger", "check", "--merchant", &merchant.merchant_id],
            &direct_env,
        );
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
        let waiting = Instant::now();
        let undelivered = loop {
            let got = receiver.accepted_event_ids();
            let missing = committed.keys().filter(|id| !got.contains(*id)).count();
            if missing == 0 || waiting.elapsed() > delivery_wait {
                break missing;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let mut first_seen: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
        for r in receiver.received().iter().filter(|r| r.answered == 200) {
            first_seen.entry(r.event_id()).or_insert(r.at);
        }
        let longest_delivery_ms = committed
            .iter()
            .filter_map(|(id, created)| {
                first_seen
                    .get(id)
                    .map(|at| (*at - *created).num_milliseconds())
            })
            .max()
            .unwrap_or(0);
        let longest = |f: &dyn Fn(&&Outcome) -> bool| {
            outcomes
                .iter()
                .filter(f)
                .map(Outcome::took)
                .max()
                .unwrap_or_default()
        };
        Audit {
            acknowledged: acked.len(),
            refused: outcomes
                .iter()
                .filter(|o| o.status != 200)
                .map(|o| o.status)
                .collect(),
            duplicates: by_key.values().filter(|ids| ids.len() > 1).count(),
            lost,
            phantoms,
            wrong_balances,
            ledger_ok: ledger.status.success(),
            ledger_output: format!(
                "{}{}",
                String::from_utf8_lossy(&ledger.stdout),
                String::from_utf8_lossy(&ledger.stderr)
            ),
            committed_events: committed.len(),
            undelivered,
            longest_delivery_ms,
            longest_payment: longest(&|_| true),
            longest_payment_after_a_lost_connection: longest(&|o| o.saw_transport_error),
        }
    }

    /// The figures, as JSON (the reports the suites write).
    pub fn figures(&self) -> Value {
        json!({
            "acknowledged_payments": self.acknowledged,
            "refused_payments": self.refused.len(),
            "duplicates": self.duplicates,
            "lost": self.lost.len(),
            "phantoms": self.phantoms,
            "wrong_balances": self.wrong_balances.len(),
            "ledger_check_passed": self.ledger_ok,
            "committed_events": self.committed_events,
            "undelivered_events": self.undelivered,
            "longest_payment_ms": self.longest_payment.as_millis() as u64,
            "longest_payment_after_a_lost_connection_ms": self.longest_payment_after_a_lost_connection.as_millis() as u64,
            "longest_event_delivery_ms": self.longest_delivery_ms,
        })
    }

    /// Fails the test unless money held: enough load got through (`at_least` payments),
    /// nothing refused, lost, duplicated or invented, every balance right, the ledger check
    /// passed and every committed event delivered.
    pub fn assert_money_held(&self, at_least: usize) {
        let report = self.figures();
        assert!(
            self.acknowledged >= at_least,
            "too little load got through: {report}"
        );
        assert!(
            self.refused.is_empty(),
            "payments refused: {:?}",
            self.refused
        );
        assert_eq!(self.duplicates, 0, "{report}");
        assert!(
            self.lost.is_empty(),
            "acknowledged but not stored once: {:?} ({report})",
            self.lost
        );
        assert_eq!(self.phantoms, 0, "stored but never acknowledged: {report}");
        assert!(self.wrong_balances.is_empty(), "{:?}", self.wrong_balances);
        assert!(self.ledger_ok, "ledger check: {}", self.ledger_output);
        assert_eq!(
            self.undelivered, 0,
            "committed events never reached the receiver: {report}"
        );
    }
}
