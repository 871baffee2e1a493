//! The service's HTTP API as the benchmark uses it: the untimed setup calls (retried with
//! the same Idempotency-Key on 5xx, 409, 429 and transport errors) and the timed
//! closed-loop driver for POST /v1/payments.
use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use reqwest::{
    Client, Method, RequestBuilder, Url,
    header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue},
};
use serde_json::{Value, json};
use uuid::Uuid;

pub const API_VERSION: &str = "2026-06-01";

/// The service a command runs against, and the credentials the harness made for it.
#[derive(clap::Args)]
pub struct Target {
    /// The service, e.g. http://127.0.0.1:8080 (without /v1).
    #[arg(long)]
    pub base: String,
    /// A label for the result (embedded, production).
    #[arg(long)]
    pub mode: String,
    /// The output of `wallet-api tenant create --sandbox --json`.
    #[arg(long)]
    pub tenant: std::path::PathBuf,
    /// The output of `wallet-api operator create --json`.
    #[arg(long)]
    pub operator: std::path::PathBuf,
}
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A client for loopback HTTP/1.1 with keep-alive: `pool` idle connections are kept, so a
/// phase at concurrency `pool` reuses its connections from one request to the next.
pub fn client(pool: usize) -> Result<Client> {
    Ok(Client::builder()
        .http1_only()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(pool)
        .pool_idle_timeout(Duration::from_secs(300))
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()?)
}

pub fn meta() -> Value {
    json!({"partner_request_id": Uuid::new_v4().to_string(), "api_version": API_VERSION})
}

#[derive(Clone)]
pub struct Api {
    pub http: Client,
    /// `http://HOST:PORT/v1`
    pub base: String,
}

fn error_text(status: u16, v: &Value) -> String {
    let code = v
        .pointer("/error/code")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let msg = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    let details = v
        .pointer("/error/details")
        .map(|d| format!(" {d}"))
        .unwrap_or_default();
    format!("HTTP {status} {code}: {msg}{details}")
}

impl Api {
    pub fn new(http: Client, base: &str) -> Api {
        Api {
            http,
            base: format!("{}/v1", base.trim_end_matches('/')),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn post(&self, path: &str, body: &Value) -> RequestBuilder {
        self.http
            .post(self.url(path))
            .header(IDEMPOTENCY_KEY, Uuid::new_v4().to_string())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
    }

    /// Sends `rb` (cloned for every attempt, so a retry carries the same Idempotency-Key)
    /// and returns the envelope's `data`.
    pub async fn send(&self, what: &str, rb: RequestBuilder) -> Result<Value> {
        let mut wait = Duration::from_millis(100);
        let mut last = String::new();
        for attempt in 0..7 {
            if attempt > 0 {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(3));
            }
            let req = rb.try_clone().context("request body cannot be cloned")?;
            let resp = match req.send().await {
                Ok(r) => r,
                Err(e) => {
                    last = format!("transport error: {e}");
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let bytes = match resp.bytes().await {
                Ok(b) => b,
                Err(e) => {
                    last = format!("reading the body: {e}");
                    continue;
                }
            };
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if (200..300).contains(&status) {
                return Ok(v.get("data").cloned().unwrap_or(Value::Null));
            }
            last = error_text(status, &v);
            if !(status >= 500 || status == 409 || status == 429) {
                break;
            }
        }
        bail!("{what}: {last}")
    }

    /// A terminal JWT (valid 600 s) for the tenant's merchant.
    pub async fn token(&self, platform_key: &str, merchant_id: &str) -> Result<String> {
        let body = json!({"meta": meta(), "context": {"merchant_id": merchant_id}});
        let data = self
            .send(
                "POST /v1/auth/token",
                self.post("/auth/token", &body)
                    .header("x-api-key", platform_key),
            )
            .await?;
        str_field(&data, "token")
    }

    /// Registers a customer wallet; returns (wallet_id, wallet_user_id).
    pub async fn import_wallet(
        &self,
        operator_key: &str,
        merchant_id: &str,
        phone: &str,
    ) -> Result<(String, String)> {
        let body = json!({"merchant_id": merchant_id, "phone": phone, "reason": "payments bench"});
        let data = self
            .send(
                "POST /v1/operator/wallets",
                self.post("/operator/wallets", &body)
                    .header("x-operator-key", operator_key),
            )
            .await?;
        Ok((
            str_field(&data, "wallet_id")?,
            str_field(&data, "wallet_user_id")?,
        ))
    }

    pub async fn credit(
        &self,
        operator_key: &str,
        wallet_id: &str,
        amount_minor: i64,
        currency: &str,
    ) -> Result<()> {
        let body = json!({"direction": "credit", "amount_minor": amount_minor,
            "currency": currency, "reason": "payments bench"});
        self.send(
            "POST /v1/operator/wallets/{id}/adjustments",
            self.post(&format!("/operator/wallets/{wallet_id}/adjustments"), &body)
                .header("x-operator-key", operator_key),
        )
        .await?;
        Ok(())
    }

    /// A fresh single-use QR payload for the wallet (supersedes the previous one).
    pub async fn mint_qr(
        &self,
        bearer: &HeaderValue,
        merchant_id: &str,
        wallet_user_id: &str,
    ) -> Result<String> {
        let body = json!({"meta": meta(), "context": {"merchant_id": merchant_id},
            "wallet_user_id": wallet_user_id});
        let data = self
            .send(
                "POST /v1/qr/mint",
                self.post("/qr/mint", &body)
                    .header(AUTHORIZATION, bearer.clone()),
            )
            .await?;
        str_field(&data, "qr_payload")
    }

    /// Sends a payment OTP for `order_ref`; returns the otp_session_id.
    pub async fn otp_send(
        &self,
        bearer: &HeaderValue,
        merchant_id: &str,
        phone: &str,
        amount_minor: i64,
        currency: &str,
        order_ref: &str,
    ) -> Result<String> {
        let body = json!({"meta": meta(), "context": {"merchant_id": merchant_id},
            "phone": phone, "amount_minor": amount_minor, "currency": currency,
            "order_ref": order_ref});
        let data = self
            .send(
                "POST /v1/payments/otp/send",
                self.post("/payments/otp/send", &body)
                    .header(AUTHORIZATION, bearer.clone()),
            )
            .await?;
        str_field(&data, "otp_session_id")
    }

    /// The sandbox SMS inbox of `phone`, newest first (at most 200).
    pub async fn sandbox_messages(&self, platform_key: &str, phone: &str) -> Result<Vec<Value>> {
        let mut url = Url::parse(&self.url("/sandbox/messages"))?;
        url.query_pairs_mut()
            .append_pair("phone", phone)
            .append_pair("limit", "200");
        let rb = self.http.get(url).header("x-api-key", platform_key);
        let data = self.send("GET /v1/sandbox/messages", rb).await?;
        match data {
            Value::Array(a) => Ok(a),
            other => bail!("GET /v1/sandbox/messages: data is not a list: {other}"),
        }
    }
}

pub fn str_field(v: &Value, k: &str) -> Result<String> {
    v.get(k)
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("response data has no string {k:?}: {v}"))
}

pub fn bearer(token: &str) -> Result<HeaderValue> {
    Ok(HeaderValue::from_str(&format!("Bearer {token}"))?)
}

/// One prepared payment: its Idempotency-Key and its body, built before the timed window.
pub struct Prepared {
    pub idem: HeaderValue,
    pub body: String,
}

impl Prepared {
    pub fn new(body: String) -> Prepared {
        let idem = HeaderValue::from_str(&Uuid::new_v4().to_string()).expect("a uuid is ascii");
        Prepared { idem, body }
    }
}

/// What a timed window saw.
#[derive(Default)]
pub struct Tally {
    /// Latency of every response (any status), in microseconds.
    pub lat_us: Vec<u32>,
    /// 2xx with a payment_id.
    pub ok: u64,
    /// "HTTP 409 CODE" or "transport: ..." -> count.
    pub errors: BTreeMap<String, u64>,
    pub samples: Vec<String>,
}

impl Tally {
    fn error(&mut self, key: String, sample: String) {
        *self.errors.entry(key).or_default() += 1;
        if self.samples.len() < 5 {
            self.samples.push(sample);
        }
    }

    pub fn merge(&mut self, mut o: Tally) {
        self.lat_us.append(&mut o.lat_us);
        self.ok += o.ok;
        for (k, n) in o.errors {
            *self.errors.entry(k).or_default() += n;
        }
        for s in o.samples {
            if self.samples.len() < 5 {
                self.samples.push(s);
            }
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn transport_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    }
}

/// Fires `items` at POST /v1/payments from `conc` tasks, each sending its next request when
/// its previous answer has arrived (closed loop), until the items run out or `budget` has
/// passed (no new request starts after it; those in flight finish). Returns the tally and
/// the window: from the first send to the last answer.
pub async fn drive(
    http: &Client,
    url: &Url,
    bearer: &HeaderValue,
    items: Vec<Prepared>,
    conc: usize,
    budget: Duration,
) -> (Tally, Duration) {
    let items = Arc::new(items);
    let next = Arc::new(AtomicUsize::new(0));
    let per_task = items.len() / conc.max(1) + 16;
    let start = Instant::now();
    let stop_at = start + budget;
    let mut tasks = Vec::with_capacity(conc);
    for _ in 0..conc {
        let (http, url, bearer) = (http.clone(), url.clone(), bearer.clone());
        let (items, next) = (items.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut t = Tally {
                lat_us: Vec::with_capacity(per_task),
                ..Tally::default()
            };
            let json = HeaderValue::from_static("application/json");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= items.len() || Instant::now() >= stop_at {
                    break;
                }
                let it = &items[i];
                let t0 = Instant::now();
                let sent = http
                    .request(Method::POST, url.clone())
                    .header(AUTHORIZATION, bearer.clone())
                    .header(IDEMPOTENCY_KEY, it.idem.clone())
                    .header(CONTENT_TYPE, json.clone())
                    .body(it.body.clone())
                    .send()
                    .await;
                let answer = match sent {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        r.bytes().await.map(|b| (status, b))
                    }
                    Err(e) => Err(e),
                };
                let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
                t.lat_us.push(us);
                match answer {
                    Ok((200..=299, b)) if contains(&b, b"\"payment_id\"") => t.ok += 1,
                    Ok((status @ 200..=299, b)) => t.error(
                        format!("HTTP {status} without payment_id"),
                        String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned(),
                    ),
                    Ok((status, b)) => {
                        let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                        let code = v
                            .pointer("/error/code")
                            .and_then(Value::as_str)
                            .unwrap_or("?");
                        t.error(format!("HTTP {status} {code}"), error_text(status, &v))
                    }
                    Err(e) => t.error(format!("transport: {}", transport_kind(&e)), e.to_string()),
                }
            }
            t
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        match task.await {
            Ok(t) => all.merge(t),
            Err(e) => all.error("driver task panicked".into(), e.to_string()),
        }
    }
    (all, start.elapsed())
}
