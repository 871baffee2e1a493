//! `payments-bench load`: overload and soak (bench/load/run.sh drives it).
//!
//! The unit of work is a **sale**: mint a QR for a wallet (`POST /v1/qr/mint`), then pay
//! 1 cent with it (`POST /v1/payments`), each under its own Idempotency-Key, as a POS does.
//!
//! 1. Setup (untimed): `--wallets` wallets registered and funded.
//! 2. **Capacity**: sales in a closed loop from `--capacity-concurrency` tasks for
//!    `--capacity-secs`; the completed sales per second are the measured capacity.
//! 3. Each `--phases` entry `MULT:SECS` is an **open loop** at MULT × capacity sales per
//!    second for SECS seconds: sales start on schedule whatever the answers, as shoppers
//!    arrive whatever the till's speed (a closed loop would slow down with the server and
//!    never overload it). Every `--interval-secs` it records the payments' and mints'
//!    p50/p99 (answered 2xx), what was shed (503 `capacity` or 429, and how fast), other
//!    failures, the RSS of the API and the worker, and the outbox backlog from the
//!    `/metrics` of the process that relays (`wallet_outbox_pending_events`,
//!    `wallet_outbox_oldest_pending_age_seconds`).
//!
//! A wallet runs one sale at a time (a new mint supersedes its previous QR); a sale due
//! while every wallet is busy is counted as `not_started` (the generator's own limit).
use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::Args;
use futures::{StreamExt, TryStreamExt, stream};
use reqwest::{
    Client,
    header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue},
};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{client, procfs};

#[derive(Args)]
pub struct LoadArgs {
    #[command(flatten)]
    target: client::Target,
    #[arg(long, default_value_t = 2048)]
    wallets: usize,
    #[arg(long, default_value_t = 4)]
    setup_concurrency: usize,
    #[arg(long, default_value_t = 64)]
    capacity_concurrency: usize,
    #[arg(long, default_value_t = 20.0)]
    capacity_secs: f64,
    /// Open-loop phases, `MULT:SECS` each, comma-separated (e.g. `0.5:30,2:30`).
    #[arg(long, default_value = "0.5:30,2:30")]
    phases: String,
    #[arg(long, default_value_t = 10.0)]
    interval_secs: f64,
    /// Request timeout of the load generator.
    #[arg(long, default_value_t = 30.0)]
    timeout_secs: f64,
    #[arg(long)]
    api_pid: Option<u32>,
    #[arg(long)]
    worker_pid: Option<u32>,
    /// The `/metrics` URL of the process that runs the outbox relay.
    #[arg(long)]
    metrics_url: Option<String>,
    #[arg(long)]
    out: PathBuf,
}

#[derive(serde::Deserialize)]
struct Tenant {
    merchant_id: String,
    platform_key: String,
}

#[derive(serde::Deserialize)]
struct Operator {
    operator_key: String,
}

/// How one request ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Ok,
    /// Refused for load: 503 with `details.subsystem: capacity`, or 429.
    Shed {
        retry_after: bool,
    },
    Failed,
}

/// What one interval saw.
#[derive(Default, Clone)]
struct Window {
    pay_ok_us: Vec<u32>,
    mint_ok_us: Vec<u32>,
    shed_us: Vec<u32>,
    shed_without_retry_after: u64,
    failures: BTreeMap<String, u64>,
    sales_started: u64,
    sales_done: u64,
    not_started: u64,
}

#[derive(Serialize, Clone, Debug)]
pub struct IntervalResult {
    pub t_secs: f64,
    pub sales_started: u64,
    pub payments: u64,
    pub payments_per_sec: f64,
    pub pay_p50_ms: f64,
    pub pay_p99_ms: f64,
    pub mint_p99_ms: f64,
    pub shed: u64,
    pub shed_p99_ms: f64,
    pub shed_without_retry_after: u64,
    pub failures: BTreeMap<String, u64>,
    pub not_started: u64,
    pub api_rss_kib: Option<u64>,
    pub worker_rss_kib: Option<u64>,
    pub outbox_pending: Option<f64>,
    pub outbox_oldest_pending_secs: Option<f64>,
}

#[derive(Serialize, Clone, Debug)]
pub struct PhaseResult {
    pub multiple: f64,
    pub rate: f64,
    pub secs: f64,
    pub summary: IntervalResult,
    pub intervals: Vec<IntervalResult>,
}

#[derive(Serialize)]
pub struct LoadResult {
    pub mode: String,
    pub wallets: usize,
    pub capacity_concurrency: usize,
    pub capacity_sales_per_sec: f64,
    pub capacity_pay_p50_ms: f64,
    pub capacity_pay_p99_ms: f64,
    pub phases: Vec<PhaseResult>,
}

fn pct(v: &mut [u32], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * q) as usize).min(v.len() - 1);
    v[i] as f64 / 1000.0
}

struct Shared {
    http: Client,
    api: client::Api,
    merchant: String,
    platform_key: String,
    bearer: RwLock<HeaderValue>,
    window: Mutex<Window>,
}

impl Shared {
    fn bearer(&self) -> HeaderValue {
        self.bearer.read().unwrap().clone()
    }

    fn note(&self, f: impl FnOnce(&mut Window)) {
        f(&mut self.window.lock().unwrap());
    }

    /// One request: its end and, on 2xx, the response data.
    async fn call(&self, path: &str, body: &Value) -> (End, u32, Option<Value>, String) {
        let t0 = Instant::now();
        let sent = self
            .http
            .post(self.api.url(path))
            .header(AUTHORIZATION, self.bearer())
            .header("idempotency-key", Uuid::new_v4().to_string())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await;
        let (end, data, what) = match sent {
            Ok(r) => {
                let status = r.status().as_u16();
                let retry_after = r.headers().contains_key("retry-after");
                let v: Value = r.json().await.unwrap_or(Value::Null);
                let subsystem = v
                    .pointer("/error/details/subsystem")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let code = v
                    .pointer("/error/code")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                match status {
                    200..=299 => (End::Ok, v.get("data").cloned(), String::new()),
                    429 => (End::Shed { retry_after }, None, String::new()),
                    503 if subsystem == "capacity" => {
                        (End::Shed { retry_after }, None, String::new())
                    }
                    _ => (
                        End::Failed,
                        None,
                        format!("{path} HTTP {status} {code} {subsystem}"),
                    ),
                }
            }
            Err(e) if e.is_timeout() => (End::Failed, None, format!("{path} timeout")),
            Err(_) => (End::Failed, None, format!("{path} transport")),
        };
        let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
        (end, us, data, what)
    }

    /// Mint, then pay. Returns whether the payment landed.
    async fn sale(&self, wallet_user_id: &str) -> bool {
        self.note(|w| w.sales_started += 1);
        let mint = json!({"meta": client::meta(), "context": {"merchant_id": self.merchant},
                          "wallet_user_id": wallet_user_id});
        let (end, us, data, what) = self.call("/qr/mint", &mint).await;
        let qr = match (end, data) {
            (End::Ok, Some(d)) => {
                self.note(|w| w.mint_ok_us.push(us));
                d.get("qr_payload")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            }
            _ => {
                self.record_refusal(end, us, what);
                None
            }
        };
        let Some(qr) = qr else {
            self.note(|w| w.sales_done += 1);
            return false;
        };
        let pay = json!({"meta": client::meta(), "context": {"merchant_id": self.merchant},
                         "credential": {"type": "qr", "qr_payload": qr},
                         "amount_minor": 1, "currency": "EUR",
                         "order_ref": Uuid::new_v4().to_string()});
        let (end, us, _, what) = self.call("/payments", &pay).await;
        let ok = end == End::Ok;
        if ok {
            self.note(|w| w.pay_ok_us.push(us));
        } else {
            self.record_refusal(end, us, what);
        }
        self.note(|w| w.sales_done += 1);
        ok
    }

    fn record_refusal(&self, end: End, us: u32, what: String) {
        self.note(|w| match end {
            End::Shed { retry_after } => {
                w.shed_us.push(us);
                if !retry_after {
                    w.shed_without_retry_after += 1;
                }
            }
            _ => *w.failures.entry(what).or_default() += 1,
        });
    }

    fn take_window(&self) -> Window {
        std::mem::take(&mut *self.window.lock().unwrap())
    }
}

async fn gauges(http: &Client, url: Option<&str>) -> (Option<f64>, Option<f64>) {
    let Some(url) = url else {
        return (None, None);
    };
    let Ok(r) = http.get(url).send().await else {
        return (None, None);
    };
    let text = r.text().await.unwrap_or_default();
    let read = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    (
        read("wallet_outbox_pending_events"),
        read("wallet_outbox_oldest_pending_age_seconds"),
    )
}

fn summarize(
    mut w: Window,
    t_secs: f64,
    span_secs: f64,
    a: &LoadArgs,
    metrics: (Option<f64>, Option<f64>),
) -> IntervalResult {
    let payments = w.pay_ok_us.len() as u64;
    IntervalResult {
        t_secs,
        sales_started: w.sales_started,
        payments,
        payments_per_sec: payments as f64 / span_secs.max(1e-9),
        pay_p50_ms: pct(&mut w.pay_ok_us, 0.50),
        pay_p99_ms: pct(&mut w.pay_ok_us, 0.99),
        mint_p99_ms: pct(&mut w.mint_ok_us, 0.99),
        shed: w.shed_us.len() as u64,
        shed_p99_ms: pct(&mut w.shed_us, 0.99),
        shed_without_retry_after: w.shed_without_retry_after,
        failures: w.failures,
        not_started: w.not_started,
        api_rss_kib: a.api_pid.and_then(|p| procfs::status_kib(p, "VmRSS")),
        worker_rss_kib: a.worker_pid.and_then(|p| procfs::status_kib(p, "VmRSS")),
        outbox_pending: metrics.0,
        outbox_oldest_pending_secs: metrics.1,
    }
}

fn merge(into: &mut Window, w: Window) {
    into.pay_ok_us.extend(w.pay_ok_us);
    into.mint_ok_us.extend(w.mint_ok_us);
    into.shed_us.extend(w.shed_us);
    into.shed_without_retry_after += w.shed_without_retry_after;
    for (k, n) in w.failures {
        *into.failures.entry(k).or_default() += n;
    }
    into.sales_started += w.sales_started;
    into.sales_done += w.sales_done;
    into.not_started += w.not_started;
}

fn log(msg: impl AsRef<str>) {
    eprintln!("[payments-bench load] {}", msg.as_ref());
}

pub async fn run(a: LoadArgs) -> Result<()> {
    let tenant: Tenant =
        serde_json::from_slice(&std::fs::read(&a.target.tenant)?).context("tenant")?;
    let op: Operator =
        serde_json::from_slice(&std::fs::read(&a.target.operator)?).context("operator")?;
    let phases: Vec<(f64, f64)> = a
        .phases
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|p| {
            let (m, s) = p.split_once(':').context("a phase is MULT:SECS")?;
            anyhow::Ok((m.parse::<f64>()?, s.parse::<f64>()?))
        })
        .collect::<Result<_>>()?;
    let http = Client::builder()
        .http1_only()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(4096)
        .timeout(Duration::from_secs_f64(a.timeout_secs))
        .build()?;
    let api = client::Api::new(http.clone(), &a.target.base);
    let token = api.token(&tenant.platform_key, &tenant.merchant_id).await?;
    let shared = Arc::new(Shared {
        http: http.clone(),
        api: api.clone(),
        merchant: tenant.merchant_id.clone(),
        platform_key: tenant.platform_key.clone(),
        bearer: RwLock::new(client::bearer(&token)?),
        window: Mutex::default(),
    });
    // The terminal token lives ten minutes: a soak renews it every eight.
    let renewing = {
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(480)).await;
                match s.api.token(&s.platform_key, &s.merchant).await {
                    Ok(t) => {
                        if let Ok(b) = client::bearer(&t) {
                            *s.bearer.write().unwrap() = b;
                        }
                    }
                    Err(e) => log(format!("renewing the terminal token failed: {e:#}")),
                }
            }
        })
    };

    log(format!(
        "{}: registering and funding {} wallets",
        a.target.mode, a.wallets
    ));
    let run_tag = Uuid::new_v4().as_u128() as u32;
    let t_setup = Instant::now();
    let wallets: Vec<String> = stream::iter(0..a.wallets)
        .map(|i| {
            let (api, key, merchant) = (&api, &op.operator_key, &tenant.merchant_id);
            async move {
                let phone = format!("+49152{:02}{:06}", run_tag % 100, i);
                let (wallet_id, user_id) = api.import_wallet(key, merchant, &phone).await?;
                api.credit(key, &wallet_id, 10_000_000, "EUR").await?;
                anyhow::Ok(user_id)
            }
        })
        .buffered(a.setup_concurrency.max(1))
        .try_collect()
        .await?;
    log(format!(
        "setup done in {:.0} s",
        t_setup.elapsed().as_secs_f64()
    ));
    let busy: Arc<Vec<AtomicBool>> =
        Arc::new((0..wallets.len()).map(|_| AtomicBool::new(false)).collect());
    let wallets = Arc::new(wallets);

    // ---- capacity: a closed loop of sales
    log(format!(
        "capacity: closed loop at concurrency {} for {:.0} s",
        a.capacity_concurrency, a.capacity_secs
    ));
    shared.take_window();
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs_f64(a.capacity_secs);
    let tasks: Vec<_> = (0..a.capacity_concurrency)
        .map(|_| {
            let (s, wallets, next) = (shared.clone(), wallets.clone(), next.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    // Each task pays from its own stride of wallets: no wallet twice at once.
                    let i = next.fetch_add(1, Ordering::Relaxed) % wallets.len();
                    s.sale(&wallets[i]).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let span = t0.elapsed().as_secs_f64();
    let mut w = shared.take_window();
    let capacity = w.pay_ok_us.len() as f64 / span;
    let (cap_p50, cap_p99) = (pct(&mut w.pay_ok_us, 0.5), pct(&mut w.pay_ok_us, 0.99));
    if capacity <= 0.0 {
        bail!("no sale completed in the capacity phase: {:?}", w.failures);
    }
    log(format!(
        "capacity: {capacity:.1} sales/s, payment p50 {cap_p50:.1} ms p99 {cap_p99:.1} ms, failures {:?}",
        w.failures
    ));
    if a.capacity_concurrency > wallets.len() {
        log("note: more capacity tasks than wallets; some sales raced on a wallet");
    }

    let mut results = Vec::new();
    for (mult, secs) in phases {
        let rate = mult * capacity;
        log(format!(
            "open loop: {mult}× capacity = {rate:.1} sales/s for {secs:.0} s"
        ));
        shared.take_window();
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(secs);
        let started = Arc::new(AtomicU64::new(0));
        let mut cursor = 0usize;
        let mut intervals = Vec::new();
        let mut phase_window = Window::default();
        let mut next_report = start + Duration::from_secs_f64(a.interval_secs);
        let mut last_report = start;
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while Instant::now() < end {
            tick.tick().await;
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            while started.load(Ordering::Relaxed) < due {
                started.fetch_add(1, Ordering::Relaxed);
                // The next free wallet, round-robin.
                let mut picked = None;
                for _ in 0..wallets.len() {
                    let i = cursor % wallets.len();
                    cursor += 1;
                    if !busy[i].swap(true, Ordering::AcqRel) {
                        picked = Some(i);
                        break;
                    }
                }
                let Some(i) = picked else {
                    shared.note(|w| w.not_started += 1);
                    continue;
                };
                let (s, wallets, busy) = (shared.clone(), wallets.clone(), busy.clone());
                tokio::spawn(async move {
                    s.sale(&wallets[i]).await;
                    busy[i].store(false, Ordering::Release);
                });
            }
            if Instant::now() >= next_report {
                let now = Instant::now();
                let metrics = gauges(&http, a.metrics_url.as_deref()).await;
                let w = shared.take_window();
                let r = summarize(
                    w.clone(),
                    now.duration_since(start).as_secs_f64(),
                    now.duration_since(last_report).as_secs_f64(),
                    &a,
                    metrics,
                );
                merge(&mut phase_window, w);
                log(format!(
                    "  t={:.0}s: {:.1} payments/s, p50 {:.1} ms, p99 {:.1} ms; shed {} (p99 {:.1} ms); failures {:?}; not started {}; RSS api {} worker {} KiB; outbox pending {:?} oldest {:?} s",
                    r.t_secs,
                    r.payments_per_sec,
                    r.pay_p50_ms,
                    r.pay_p99_ms,
                    r.shed,
                    r.shed_p99_ms,
                    r.failures,
                    r.not_started,
                    r.api_rss_kib.unwrap_or(0),
                    r.worker_rss_kib.unwrap_or(0),
                    r.outbox_pending,
                    r.outbox_oldest_pending_secs,
                ));
                intervals.push(r);
                last_report = now;
                next_report = now + Duration::from_secs_f64(a.interval_secs);
            }
        }
        // Sales still in flight finish (bounded by the request timeout).
        let drain = Instant::now();
        while busy.iter().any(|b| b.load(Ordering::Acquire))
            && drain.elapsed() < Duration::from_secs_f64(a.timeout_secs * 2.0 + 5.0)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        merge(&mut phase_window, shared.take_window());
        let metrics = gauges(&http, a.metrics_url.as_deref()).await;
        let summary = summarize(phase_window, secs, secs, &a, metrics);
        log(format!(
            "phase {mult}×: {:.1} payments/s of {:.1} due, p50 {:.1} ms, p99 {:.1} ms; shed {} (p99 {:.1} ms, {} without Retry-After); failures {:?}; not started {}",
            summary.payments_per_sec,
            rate,
            summary.pay_p50_ms,
            summary.pay_p99_ms,
            summary.shed,
            summary.shed_p99_ms,
            summary.shed_without_retry_after,
            summary.failures,
            summary.not_started
        ));
        results.push(PhaseResult {
            multiple: mult,
            rate,
            secs,
            summary,
            intervals,
        });
    }
    renewing.abort();
    let result = LoadResult {
        mode: a.target.mode.clone(),
        wallets: wallets.len(),
        capacity_concurrency: a.capacity_concurrency,
        capacity_sales_per_sec: capacity,
        capacity_pay_p50_ms: cap_p50,
        capacity_pay_p99_ms: cap_p99,
        phases: results,
    };
    std::fs::write(&a.out, serde_json::to_vec_pretty(&result)?)?;
    Ok(())
}
