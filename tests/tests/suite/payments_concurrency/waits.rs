//! Lost responses and long waits: a retry replays what committed, and a payment that
//! waits too long for its wallet gets a retryable error.
use std::time::Duration;

use serde_json::json;
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

/// Forwards one request to the service and drops the response on the floor: to the caller
/// it is as if the service crashed after committing and before answering.
pub(super) async fn response_dropping_proxy(upstream: String) -> String {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let server = tokio::net::TcpStream::connect(upstream).await.unwrap();
        let (mut client_rx, client_tx) = client.into_split();
        let (mut server_rx, mut server_tx) = server.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut client_rx, &mut server_tx).await;
        });
        // Wait for the service's answer (it has committed by then), then hang up on the
        // caller without relaying a byte of it.
        let mut buf = vec![0u8; 64 * 1024];
        let _ = server_rx.read(&mut buf).await;
        drop(client_tx);
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn a_response_lost_after_commit_is_replayed_by_the_retry_without_a_second_debit() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let key = Uuid::new_v4().to_string();
    let body = shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 300, "currency": "EUR"}));
    let upstream = app
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let via = response_dropping_proxy(upstream).await;
    let lost = app
        .client
        .post(format!("{via}/payments"))
        .bearer_auth(&shop.token)
        .header("Idempotency-Key", &key)
        .json(&body)
        .send()
        .await;
    assert!(
        lost.is_err() || lost.as_ref().is_ok_and(|r| r.status().as_u16() != 200),
        "the caller saw no answer"
    );

    let retry = send(
        app.post("/payments")
            .bearer_auth(&shop.token)
            .header("Idempotency-Key", &key)
            .json(&body),
    )
    .await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(
        retry.body["meta"]["idempotency_replayed"], true,
        "the committed original is replayed"
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 700, "debited once");
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_payment_queued_too_long_behind_a_wallet_lock_gets_a_retryable_error_not_an_endless_wait()
{
    use sea_orm::{ConnectionTrait, Statement};
    if tests::mode() != tests::Mode::Production {
        // SQLite writers queue on the database lock up to its busy timeout instead.
        return;
    }
    let app = TestApp::spawn_with(false, |c| c.db_lock_timeout_ms = 300).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let db = &app.server.state.db;
    let holder = db.begin().await.unwrap();
    holder
        .execute_raw(Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "SELECT id FROM wallets WHERE id = $1 FOR UPDATE",
            [Uuid::parse_str(&c.wallet_id).unwrap().into()],
        ))
        .await
        .unwrap();
    let key = Uuid::new_v4().to_string();
    let extra = json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"});
    let started = std::time::Instant::now();
    let r = shop.post_with_key("/payments", extra.clone(), &key).await;
    assert_eq!(
        (r.status, r.code()),
        (503, "INTERNAL_SERVER_ERROR"),
        "{}",
        r.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded: {:?}",
        started.elapsed()
    );
    assert!(r.headers.get("retry-after").is_some());
    holder.rollback().await.unwrap();

    let r = shop.post_with_key("/payments", extra, &key).await;
    assert_eq!(
        r.status, 200,
        "the same key succeeds once the wallet is free: {}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
}

#[tokio::test]
async fn an_otp_payment_waiting_too_long_for_its_wallets_turn_gets_a_retryable_error() {
    // Payments of one wallet whose wallet is known before the transaction (OTP) take turns
    // in the process; the wait is bounded like a row lock's. Its own workers deliver the OTP
    // SMS (on a database of its own, as its lock timeout differs from the run's).
    let app = TestApp::spawn_isolated(true, |c| c.db_lock_timeout_ms = 300).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let (order, session, code) = shop.otp_sessions(&c, 1, 100).await.remove(0);
    let wallet = Uuid::parse_str(&c.wallet_id).unwrap();
    let queue = app.server.state.wallet_queue.clone();
    let held = queue.take(wallet, Duration::from_secs(1)).await.unwrap();

    let key = Uuid::new_v4().to_string();
    let extra = json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                       "amount_minor": 100, "currency": "EUR", "order_ref": order});
    let started = std::time::Instant::now();
    let r = shop.post_with_key("/payments", extra.clone(), &key).await;
    assert_eq!(
        (r.status, r.code()),
        (503, "INTERNAL_SERVER_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(r.body["error"]["details"]["retryable"], true);
    assert!(r.headers.get("retry-after").is_some());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded: {:?}",
        started.elapsed()
    );
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        1_000,
        "nothing moved"
    );

    drop(held);
    let r = shop.post_with_key("/payments", extra, &key).await;
    assert_eq!(
        r.status, 200,
        "the same key succeeds in its turn: {}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
    assert_eq!(queue.busy_wallets(), 0, "no line is left behind");
    shop.assert_ledger_consistent().await;
    app.stop().await;
}
