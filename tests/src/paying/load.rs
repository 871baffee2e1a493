//! The clients: a merchant onboarded and funded, and one client per customer paying until
//! told to stop, each payment retried under its Idempotency-Key until a definitive answer.
use std::{
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::{FUNDING, run_cli};
use crate::webhooks::Receiver;

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

    /// POSTs `fields` (beside the merchant's envelope) to `path` with the terminal's token
    /// under `key` until a definitive answer; a 401 (the token expired) is sent again with a
    /// fresh token. Returns the answer and whether a transport error was seen.
    async fn post_as_terminal(
        &self,
        client: &reqwest::Client,
        urls: &[String],
        refusals: &Refusals,
        path: &str,
        key: &str,
        fields: Value,
    ) -> (u16, Value, bool) {
        let body = with(envelope(&self.merchant_id), fields);
        let mut transport = false;
        loop {
            let token = self.token.read().unwrap().clone();
            let (s, b, t) = until_definitive(client, urls, Some(refusals), |c, base| {
                c.post(format!("{base}{path}"))
                    .bearer_auth(&token)
                    .header("Idempotency-Key", key)
                    .json(&body)
            })
            .await;
            transport |= t;
            if s != 401 {
                return (s, b, transport);
            }
            self.refresh_token(client, urls).await;
        }
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
        let qr_key = Uuid::new_v4().to_string();
        let customer = json!({"customer": {"credential_type": "phone", "phone": phone}});
        let (s, b, mut transport) = m
            .post_as_terminal(&client, &urls, &refusals, "/qr/mint", &qr_key, customer)
            .await;
        assert_eq!(s, 200, "QR mint answered {s}: {b}");
        let qr = b["data"]["qr_payload"].as_str().unwrap().to_string();
        let payment = json!({"credential": {"type": "qr", "qr_payload": qr},
                             "amount_minor": amount, "currency": "EUR", "order_ref": key});
        let (status, body, t) = m
            .post_as_terminal(&client, &urls, &refusals, "/payments", &key, payment)
            .await;
        transport |= t;
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
