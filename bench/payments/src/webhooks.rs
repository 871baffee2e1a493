//! `payments-bench webhooks`: webhook delivery throughput and latency. Starts a receiver on
//! 127.0.0.1 that answers 200 at once, registers S subscriptions to `payment.completed`,
//! makes N payments as fast as C concurrent tills can (each with a fresh QR), and waits
//! until every (payment, subscription) delivery arrived. Reports deliveries per second
//! (from the first payment's commit to the last delivery) and the latency from each
//! payment's commit (its 2xx response) to each delivery's arrival.
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::Args;
use futures::{StreamExt, stream};
use poem::{Request, Response};
use serde::Serialize;
use serde_json::{Value, json};

use crate::client::{self, Api, bearer, meta, str_field};

#[derive(Args)]
pub struct WebhookArgs {
    #[command(flatten)]
    target: client::Target,
    #[arg(long, default_value_t = 10)]
    subscriptions: usize,
    /// Payments made (each one event, delivered to every subscription).
    #[arg(long, default_value_t = 1000)]
    payments: usize,
    /// Concurrent tills making them.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Payments per second offered, spread evenly over the tills (0: as fast as they can).
    /// With S subscriptions the offered delivery rate is S times this.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Wallets paid from (setup makes two bcrypt-checked operator calls each).
    #[arg(long, default_value_t = 64)]
    wallets: usize,
    /// Longest wait for the last delivery, seconds.
    #[arg(long, default_value_t = 180)]
    wait_secs: u64,
    /// The worker's pid, when it runs under `valgrind --tool=callgrind --instr-atstart=no`
    /// with `--worker-callgrind-out`: count its instructions from the first payment to the
    /// last delivery.
    #[arg(long, requires = "worker_callgrind_out")]
    worker_pid: Option<u32>,
    /// The worker's `--callgrind-out-file`.
    #[arg(long, requires = "worker_pid")]
    worker_callgrind_out: Option<PathBuf>,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Serialize)]
pub struct WebhookResult {
    pub mode: String,
    pub subscriptions: usize,
    pub payments: usize,
    pub expected_deliveries: usize,
    /// Payments per second asked for (0: unpaced).
    pub offered_payments_per_sec: f64,
    pub delivered: usize,
    /// Deliveries that arrived more than once (at least once allows it; receivers dedup).
    pub duplicates: usize,
    pub payments_secs: f64,
    pub payments_per_sec: f64,
    /// From the first payment's commit to the last delivery.
    pub span_secs: f64,
    pub deliveries_per_sec: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    /// The worker's instructions from the first payment to the last delivery ÷ deliveries
    /// (callgrind runs only): the relay, the fan-out and the delivery of each.
    pub worker_instructions_per_delivery: Option<u64>,
}

#[derive(Default)]
struct Seen {
    /// (payment_id, subscription path) → arrival
    arrivals: HashMap<(String, String), Instant>,
    duplicates: usize,
    last: Option<Instant>,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub async fn run(a: WebhookArgs) -> Result<()> {
    let tenant: Value = serde_json::from_slice(&std::fs::read(&a.target.tenant)?)?;
    let operator: Value = serde_json::from_slice(&std::fs::read(&a.target.operator)?)?;
    let merchant = str_field(&tenant, "merchant_id")?;
    let platform_key = str_field(&tenant, "platform_key")?;
    let operator_key = str_field(&operator, "operator_key")?;
    let api = Api::new(client::client(a.concurrency.max(16))?, &a.target.base);

    // The receiver: records each arrival, answers 200 at once.
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let s = seen.clone();
    let ep = poem::endpoint::make(move |req: Request| {
        let s = s.clone();
        async move {
            let path = req.uri().path().to_string();
            let body = req.into_body().into_bytes().await.unwrap_or_default();
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let pid = v["data"]["payment_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let now = Instant::now();
            let mut g = s.lock().expect("seen");
            if g.arrivals.insert((pid, path), now).is_some() {
                g.duplicates += 1;
            }
            g.last = Some(now);
            Response::builder()
                .status(poem::http::StatusCode::OK)
                .finish()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let acceptor = poem::listener::TcpAcceptor::from_tokio(listener)?;
    tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(ep));

    for i in 0..a.subscriptions {
        let body = json!({"meta": meta(), "context": {"merchant_id": merchant},
            "url": format!("http://127.0.0.1:{port}/s{i}"), "event_types": ["payment.completed"]});
        api.send(
            "POST /v1/webhooks/subscriptions",
            api.http
                .post(api.url("/webhooks/subscriptions"))
                .header("x-api-key", &platform_key)
                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                .json(&body),
        )
        .await?;
    }

    eprintln!("webhooks bench: {} wallets", a.wallets);
    let wallets: Vec<String> = stream::iter(0..a.wallets)
        .map(|i| {
            let (api, ok, m) = (api.clone(), operator_key.clone(), merchant.clone());
            async move {
                let phone = format!("+4916{:09}", 100_000_000 + i * 7919 % 900_000_000);
                let (wallet, user) = api.import_wallet(&ok, &m, &phone).await?;
                api.credit(&ok, &wallet, 10_000_000, "EUR").await?;
                Ok::<_, anyhow::Error>(user)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let token = bearer(&api.token(&platform_key, &merchant).await?)?;

    eprintln!(
        "webhooks bench: {} payments at concurrency {}",
        a.payments, a.concurrency
    );
    let mut worker = a
        .worker_pid
        .zip(a.worker_callgrind_out.clone())
        .map(|(pid, out)| crate::callgrind::Callgrind::new(pid, out));
    if let Some(w) = &worker {
        w.set(true)?;
    }
    let started = Instant::now();
    // One till per wallet, paying one after another: a QR mint supersedes the wallet's
    // previous nonce, so two payments of one wallet must not overlap.
    let tills = a.concurrency.min(wallets.len()).max(1);
    let per_till = a.payments.div_ceil(tills);
    let commits: Vec<(String, Instant)> = stream::iter(0..tills)
        .map(|t| {
            let (api, token, m) = (api.clone(), token.clone(), merchant.clone());
            let user = wallets[t].clone();
            let count = per_till.min(a.payments.saturating_sub(t * per_till));
            let rate = a.rate;
            async move {
                let mut out = Vec::with_capacity(count);
                for i in 0..count {
                    if rate > 0.0 {
                        // Payment i of till t is due at (i * tills + t) / rate seconds.
                        let due = started + Duration::from_secs_f64((i * tills + t) as f64 / rate);
                        tokio::time::sleep_until(due.into()).await;
                    }
                    let qr = api.mint_qr(&token, &m, &user).await?;
                    let body = json!({"meta": meta(), "context": {"merchant_id": m},
                        "credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 1,
                        "currency": "EUR", "order_ref": format!("WB-{t}-{i}")});
                    let data = api
                        .send(
                            "POST /v1/payments",
                            api.http
                                .post(api.url("/payments"))
                                .header("authorization", token.clone())
                                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                                .json(&body),
                        )
                        .await?;
                    out.push((str_field(&data, "payment_id")?, Instant::now()));
                }
                Ok::<_, anyhow::Error>(out)
            }
        })
        .buffer_unordered(tills)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let payments_secs = started.elapsed().as_secs_f64();
    let first_commit = commits
        .iter()
        .map(|(_, t)| *t)
        .min()
        .context("no payments")?;

    let expected = commits.len() * a.subscriptions;
    let deadline = Instant::now() + Duration::from_secs(a.wait_secs);
    loop {
        let n = seen.lock().expect("seen").arrivals.len();
        if n >= expected {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("webhooks bench: only {n} of {expected} deliveries arrived in time");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let worker_instructions = match worker.as_mut() {
        Some(w) => {
            w.set(false)?;
            Some(w.dump()?)
        }
        None => None,
    };
    let g = seen.lock().expect("seen");
    let commit_of: HashMap<&str, Instant> = commits.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    let mut lat: Vec<f64> = g
        .arrivals
        .iter()
        .filter_map(|((pid, _), at)| {
            let c = commit_of.get(pid.as_str())?;
            Some(at.saturating_duration_since(*c).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(|x, y| x.total_cmp(y));
    let span = g.last.map_or(0.0, |l| {
        l.saturating_duration_since(first_commit).as_secs_f64()
    });
    let r = WebhookResult {
        mode: a.target.mode,
        subscriptions: a.subscriptions,
        payments: a.payments,
        expected_deliveries: expected,
        offered_payments_per_sec: a.rate,
        delivered: g.arrivals.len(),
        duplicates: g.duplicates,
        payments_secs,
        payments_per_sec: a.payments as f64 / payments_secs,
        span_secs: span,
        deliveries_per_sec: if span > 0.0 {
            g.arrivals.len() as f64 / span
        } else {
            0.0
        },
        latency_ms_p50: pct(&lat, 0.5),
        latency_ms_p99: pct(&lat, 0.99),
        latency_ms_max: lat.last().copied().unwrap_or(0.0),
        worker_instructions_per_delivery: worker_instructions
            .map(|n| n / (g.arrivals.len() as u64).max(1)),
    };
    std::fs::write(&a.out, serde_json::to_vec_pretty(&r)?)?;
    println!("{}", serde_json::to_string_pretty(&r)?);
    if r.delivered < expected {
        bail!("{} of {} deliveries arrived", r.delivered, expected);
    }
    Ok(())
}
