//! The example receivers in `examples/webhooks/` (Python and TypeScript on their standard
//! libraries, Rust on poem), run as a partner would run them, against deliveries the
//! service really makes: each verifies the signature, refuses a forged or stale one,
//! acknowledges a redelivered event as a duplicate, and keeps verifying across a secret
//! rotation with either secret during the overlap.
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tests::{
    TestApp,
    procs::{free_port, run_ok, tool},
    send,
    shop::Shop,
};

use super::{history, subscribe};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Python,
    TypeScript,
    Rust,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The command that starts one receiver, built first where it needs building.
fn command(kind: Kind) -> Command {
    let dir = root().join("examples/webhooks");
    match kind {
        Kind::Python => {
            let mut c = Command::new("python3");
            c.arg(dir.join("python/receiver.py"));
            c
        }
        Kind::TypeScript => {
            static BUILT: OnceLock<()> = OnceLock::new();
            let ts = dir.join("typescript");
            BUILT.get_or_init(|| {
                // The compiler only: the receiver itself uses nothing but node:http and node:crypto.
                run_ok(
                    tool("npm")
                        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                        .current_dir(&ts),
                    "npm ci (examples/webhooks/typescript)",
                );
                run_ok(
                    tool("npx").args(["tsc", "-p", "."]).current_dir(&ts),
                    "tsc --strict (examples/webhooks/typescript)",
                );
            });
            let mut c = Command::new("node");
            c.arg(ts.join("dist/receiver.js"));
            c
        }
        Kind::Rust => {
            static BUILT: OnceLock<()> = OnceLock::new();
            BUILT.get_or_init(|| {
                run_ok(
                    tool(env!("CARGO"))
                        .args(["build", "-q", "-p", "webhook-receiver"])
                        .current_dir(root()),
                    "cargo build -p webhook-receiver",
                );
            });
            let exe = std::env::current_exe().unwrap();
            Command::new(
                exe.parent()
                    .unwrap()
                    .parent()
                    .unwrap()
                    .join("webhook-receiver"),
            )
        }
    }
}

/// A running receiver and the JSON lines it prints.
struct Running {
    child: Child,
    lines: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Value>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(kind: Kind, port: u16, secrets: &[&str]) -> Running {
    let mut child = command(kind)
        .env("WEBHOOK_SECRETS", secrets.join(","))
        .env("PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting the {kind:?} receiver: {e}"));
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let r = Running {
        child,
        lines: tokio::sync::Mutex::new(rx),
    };
    let first = r.next("listening").await;
    assert_eq!(first["outcome"], "listening", "{kind:?}: {first}");
    assert_eq!(first["port"], port);
    r
}

impl Running {
    /// The next line the receiver prints (awaited: the service runs on this same runtime).
    async fn next(&self, what: &str) -> Value {
        let mut lines = self.lines.lock().await;
        tokio::time::timeout(Duration::from_secs(60), lines.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("the receiver printed no line for {what}"))
    }
}

fn signed(secret: &str, t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

async fn pay_and_expect_processed(shop: &Shop<'_>, r: &Running) -> String {
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let paid = shop.pay(&c, 100).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let line = r.next("the payment's delivery").await;
    assert_eq!(line["outcome"], "processed", "{line}");
    assert_eq!(line["event_type"], "payment.completed", "{line}");
    line["event_id"].as_str().unwrap().to_string()
}

async fn exercise(kind: Kind) {
    // Builds (npm ci, tsc, cargo) block: off the runtime and before the service starts on it.
    tokio::task::spawn_blocking(move || drop(command(kind)))
        .await
        .unwrap();
    // Its own database and workers: no other test's worker can hold (and, stopping, delay)
    // the redelivery the receiver waits for.
    let app = TestApp::spawn_isolated(true, |_| {}).await;
    let shop = Shop::open(&app).await;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/webhooks");
    let (sub, secret) = subscribe(&shop, &url, json!(["payment.completed"])).await;
    let receiver = start(kind, port, &[&secret]).await;

    // A real delivery verifies and is processed.
    let event_id = pay_and_expect_processed(&shop, &receiver).await;

    // The service redelivers it: the same event_id is acknowledged as a duplicate.
    // Once the service has recorded the first attempt (the receiver answers before that):
    // what a partner redelivers is a delivery the history shows as delivered.
    let delivery = tests::eventually(Duration::from_secs(30), "the delivery recorded", || async {
        history(&shop, &sub)
            .await
            .into_iter()
            .find(|d| d["event_id"] == event_id.as_str() && d["state"] == "DELIVERED")
    })
    .await;
    let r = send(
        app.post(&format!(
            "/webhooks/subscriptions/{sub}/deliveries/{}/redeliver",
            delivery["delivery_id"].as_str().unwrap()
        ))
        .header("x-api-key", &shop.tenant.platform_key)
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .json(&shop.body(json!({}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let line = receiver.next("the redelivery").await;
    assert_eq!(line["outcome"], "duplicate", "{kind:?}: {line}");
    assert_eq!(line["event_id"], event_id.as_str());

    // Forged and stale signatures are refused with 400.
    let now = chrono::Utc::now().timestamp();
    let body = json!({"event_id": "evt_forged", "event_type": "payment.completed"}).to_string();
    let http = reqwest::Client::new();
    for (header, reason) in [
        (signed("whsec_not_the_secret", now, &body), "bad_signature"),
        (signed(&secret, now - 3600, &body), "stale_timestamp"),
        ("v1=deadbeef".to_string(), "malformed_signature"),
    ] {
        let resp = http
            .post(&url)
            .header("Service-Signature", header)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{kind:?} {reason}");
        let line = receiver.next(reason).await;
        assert_eq!(line["outcome"], "rejected", "{kind:?}: {line}");
        assert_eq!(line["reason"], reason, "{kind:?}: {line}");
    }
    drop(receiver);

    // Rotation: during the overlap the service signs with both secrets, so a receiver that
    // knows only the new one and one that still knows only the old one both verify.
    let r = send(
        app.post(&format!("/webhooks/subscriptions/{sub}/rotate-secret"))
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&shop.body(json!({}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let new_secret = r.body["data"]["secret"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    for known in [&new_secret, &secret] {
        let receiver = start(kind, port, &[known]).await;
        pay_and_expect_processed(&shop, &receiver).await;
    }
    app.stop().await;
}

#[tokio::test]
async fn the_python_receiver_verifies_deduplicates_and_survives_a_rotation() {
    exercise(Kind::Python).await;
}

#[tokio::test]
async fn the_typescript_receiver_verifies_deduplicates_and_survives_a_rotation() {
    exercise(Kind::TypeScript).await;
}

#[tokio::test]
async fn the_rust_receiver_verifies_deduplicates_and_survives_a_rotation() {
    exercise(Kind::Rust).await;
}
