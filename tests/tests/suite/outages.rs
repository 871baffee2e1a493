//! A dependency that stops answering without refusing (its packets dropped): every request
//! still ends within the documented bound (`WALLET_REQUEST_TIMEOUT_MS`) with a retryable
//! 503, and once the dependency answers again, retries with the same Idempotency-Key
//! settle every payment exactly once.
use std::time::{Duration, Instant};

use serde_json::json;
use tests::{
    Mode, Reply, TestApp, mode,
    proxy::Proxy,
    redis_server::PrivateRedis,
    shop::{Customer, Shop},
};
use uuid::Uuid;

const DEADLINE_MS: u64 = 3_000;
/// What a caller may wait past the deadline: the 503 on its way back.
const SLACK: Duration = Duration::from_millis(1_500);

/// One payment as a POS sends it, under a key of its own.
struct Attempt {
    key: String,
    qr: String,
    customer: Customer,
}

async fn pay(shop: &Shop<'_>, a: &Attempt) -> (Reply, Duration) {
    let started = Instant::now();
    let r = shop
        .post_with_key(
            "/payments",
            json!({"credential": {"type": "qr", "qr_payload": a.qr}, "amount_minor": 100, "currency": "EUR"}),
            &a.key,
        )
        .await;
    (r, started.elapsed())
}

/// A burst of payments; `break_it` runs while they are in flight. Every one must end within
/// the bound, paid or with a retryable 503.
async fn burst_then_recover(
    shop: &Shop<'_>,
    attempts: &[Attempt],
    break_it: impl FnOnce(),
    heal: impl FnOnce(),
) {
    let calls = attempts.iter().map(|a| pay(shop, a));
    let burst = futures::future::join_all(calls);
    let (answers, ()) = tokio::join!(burst, async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        break_it();
    });
    // One more, started while the dependency is silent.
    let late = Attempt {
        key: Uuid::new_v4().to_string(),
        qr: attempts[0].qr.clone(),
        customer: attempts[0].customer.clone(),
    };
    let (r, took) = pay(shop, &late).await;
    let mut unavailable = 0;
    for (r, took) in answers.iter().chain(std::iter::once(&(r, took))) {
        assert!(
            *took < Duration::from_millis(DEADLINE_MS) + SLACK,
            "a request took {took:?}: {}",
            r.body
        );
        match r.status {
            200 => {}
            503 => {
                unavailable += 1;
                assert_eq!(r.code(), "INTERNAL_SERVER_ERROR");
                assert_eq!(r.body["error"]["details"]["retryable"], true, "{}", r.body);
                assert!(r.headers.get("retry-after").is_some());
            }
            other => panic!("unexpected {other}: {}", r.body),
        }
    }
    assert!(unavailable > 0, "the outage reached no request");
    heal();
    // Retries with the same key settle every payment, once.
    for a in attempts {
        let mut last = None;
        for _ in 0..40 {
            let (r, _) = pay(shop, a).await;
            // 409: the attempt the deadline cut off still holds the key, for at most its
            // lease (4 s).
            if r.status != 503 && r.status != 409 {
                last = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let r = last.expect("the dependency came back");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(shop.balance(&a.customer).await["actual_minor"], 900);
    }
    shop.assert_ledger_consistent().await;
}

async fn attempts(shop: &Shop<'_>, n: usize) -> Vec<Attempt> {
    let mut out = Vec::new();
    for _ in 0..n {
        let customer = shop.customer().await;
        shop.fund(&customer, 1_000).await;
        out.push(Attempt {
            key: Uuid::new_v4().to_string(),
            qr: shop.qr(&customer).await,
            customer,
        });
    }
    out
}

#[tokio::test]
async fn a_black_holed_database_ends_every_request_within_the_deadline_and_recovers() {
    if mode() != Mode::Production {
        eprintln!("production mode only: an embedded SQLite file has no network to lose");
        return;
    }
    let (proxy, proxied) = tests::proxy::database().await;
    let app = TestApp::spawn_with(false, |c| {
        c.database_url = Some(proxied);
        c.request_timeout_ms = DEADLINE_MS;
        c.idempotency_wait_ms = 1_000;
        c.db_acquire_timeout_ms = 1_000;
    })
    .await;
    let shop = Shop::open(&app).await;
    let attempts = attempts(&shop, 12).await;
    burst_then_recover(&shop, &attempts, || proxy.black_hole(), || proxy.heal()).await;
}

#[tokio::test]
async fn a_black_holed_redis_ends_every_request_within_its_bound_and_recovers() {
    if mode() != Mode::Production {
        eprintln!("production mode only: embedded mode keeps its locks in process");
        return;
    }
    let redis = PrivateRedis::start();
    let proxy = Proxy::start(format!("127.0.0.1:{}", redis.port).parse().unwrap()).await;
    let app = TestApp::spawn_with(false, |c| {
        c.redis_url = Some(format!("redis://127.0.0.1:{}", proxy.port));
        c.redis_mode = api::config::RedisMode::Standalone;
        c.redis_timeout_ms = 300;
        c.request_timeout_ms = DEADLINE_MS;
        c.idempotency_wait_ms = 1_000;
    })
    .await;
    let shop = Shop::open(&app).await;
    let attempts = attempts(&shop, 12).await;
    burst_then_recover(&shop, &attempts, || proxy.black_hole(), || proxy.heal()).await;
    drop(redis);
}

/// Issue 25, point 8: past the requests a replica runs and queues, a request is refused at
/// once (503 `capacity`, Retry-After) instead of queueing on the database without bound;
/// health still answers; the admitted requests finish normally.
#[tokio::test]
async fn past_its_running_and_waiting_requests_a_replica_sheds_load_at_once() {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let app = TestApp::spawn_with(false, |c| {
        c.max_inflight_requests = 2;
        c.max_queued_requests = 1;
        c.db_lock_timeout_ms = 15_000;
        c.request_timeout_ms = 20_000;
    })
    .await;
    let shop = Shop::open(&app).await;
    let attempts = attempts(&shop, 3).await;
    // Hold every write (SQLite's write turn; on PostgreSQL the three wallets' rows).
    let held = api::store::begin(&app.server.state.db).await.unwrap();
    if mode() == Mode::Production {
        let ids: Vec<String> = attempts
            .iter()
            .map(|a| format!("'{}'", a.customer.wallet_id))
            .collect();
        held.execute_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT id FROM wallets WHERE id IN ({}) FOR UPDATE",
                ids.join(",")
            ),
        ))
        .await
        .unwrap();
    }
    let running = futures::future::join_all(attempts.iter().map(|a| pay(&shop, a)));
    let probe = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let started = Instant::now();
        let r = tests::send(
            app.get("/capabilities")
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        let took = started.elapsed();
        let health = tests::send(app.get("/health")).await;
        drop(held);
        (r, took, health)
    };
    let (paid, (shed, took, health)) = tokio::join!(running, probe);
    shed.assert_envelope();
    assert_eq!(
        (shed.status, shed.code()),
        (503, "INTERNAL_SERVER_ERROR"),
        "{}",
        shed.body
    );
    assert_eq!(shed.body["error"]["details"]["subsystem"], "capacity");
    assert_eq!(shed.body["error"]["details"]["retryable"], true);
    assert!(shed.headers.get("retry-after").is_some());
    assert!(took < Duration::from_millis(200), "shedding took {took:?}");
    assert_eq!(health.status, 200, "health is never shed: {}", health.body);
    for (r, _) in paid {
        assert_eq!(r.status, 200, "an admitted request failed: {}", r.body);
    }
    let again = tests::send(
        app.get("/capabilities")
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(again.status, 200);
}
