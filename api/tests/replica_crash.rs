//! A replica killed mid-payment: the partner's retry on another replica is answered within
//! seconds, because the dead replica held the payment's Idempotency-Key only as a short
//! lease. `wallet-api` runs as a real process, on the run's PostgreSQL and Redis.
//! Production mode only.
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement, TransactionTrait};
use serde_json::json;
use tests::{
    Mode, TestApp, mode,
    procs::{Process, free_port, wait_for_port},
    shop::Shop,
};
use uuid::Uuid;

fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn env_of(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Issue 25, point 6: a replica killed while it runs a payment holds that payment's
/// Idempotency-Key only as a short lease, so the partner's retry on another replica is
/// answered within seconds (it once waited out a 60-second lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_replica_died_mid_payment_is_answered_within_seconds() {
    if mode() != Mode::Production {
        return;
    }
    install_tls();
    let b = TestApp::spawn().await;
    let shop = Shop::open(&b).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let cfg = tests::test_config();
    let port = free_port();
    let log = std::env::temp_dir().join(format!("wallet-crash-{port}.log"));
    let env = env_of(&[
        ("WALLET_DATABASE_URL", cfg.database_url.clone().unwrap()),
        ("WALLET_REDIS_URL", cfg.redis_url.clone().unwrap()),
        ("WALLET_REDIS_PREFIX", cfg.redis_prefix.clone()),
        (
            "WALLET_JWT_SECRET",
            cfg.jwt_secret.as_ref().unwrap().expose().to_string(),
        ),
        (
            "WALLET_SECRET_KEY",
            cfg.secret_key.as_ref().unwrap().expose().to_string(),
        ),
        ("WALLET_DATA_DIR", cfg.data_dir.display().to_string()),
        ("WALLET_LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("WALLET_METRICS_LISTEN_ADDR", "127.0.0.1:0".into()),
        ("WALLET_RUN_WORKERS", "false".into()),
        ("WALLET_DB_LOCK_TIMEOUT_MS", "30000".into()),
        ("WALLET_DB_STATEMENT_TIMEOUT_MS", "30000".into()),
        ("WALLET_REQUEST_TIMEOUT_MS", "60000".into()),
    ]);
    let mut a = Process::start("wallet-api", &["serve"], &env, &log);
    wait_for_port(port, Duration::from_secs(60));

    // Hold the wallet's row, so the payment on replica a waits with its key claimed.
    let holder = Database::connect(cfg.database_url.clone().unwrap())
        .await
        .unwrap();
    let txn = holder.begin().await.unwrap();
    txn.execute_raw(Statement::from_string(
        DbBackend::Postgres,
        format!(
            "SELECT id FROM wallets WHERE id = '{}' FOR UPDATE",
            c.wallet_id
        ),
    ))
    .await
    .unwrap();
    let key = Uuid::new_v4().to_string();
    let body = shop.body(json!({"credential": {"type": "qr", "qr_payload": qr},
                                "amount_minor": 250, "currency": "EUR", "order_ref": key}));
    let in_flight = tokio::spawn({
        let (body, key, token) = (body.clone(), key.clone(), shop.token.clone());
        async move {
            reqwest::Client::new()
                .post(format!("http://127.0.0.1:{port}/v1/payments"))
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    a.kill();
    let killed = Instant::now();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the replica died mid-request"
    );
    txn.rollback().await.unwrap();

    // The partner retries on the surviving replica until it gets an answer.
    let answer = loop {
        let r = tests::send(
            b.post("/payments")
                .bearer_auth(&shop.token)
                .header("Idempotency-Key", &key)
                .json(&body),
        )
        .await;
        if r.status != 409 {
            break r;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "still locked out {:?} after the crash",
            killed.elapsed()
        );
    };
    let waited = killed.elapsed();
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        waited < Duration::from_secs(8),
        "the retry was answered {waited:?} after the crash"
    );
    eprintln!("retry answered {waited:?} after the replica died");
    assert_eq!(shop.balance(&c).await["actual_minor"], 750);
}
