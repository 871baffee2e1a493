//! Redis Cluster (docs/scaling.md, section 3): every key one script touches carries one hash
//! tag, so the service runs on a cluster as on one server; a master that dies mid-run costs
//! fast, retryable 503s for the keys it served until its replica takes over, health that
//! says so, and no idempotency guarantee: the lock and response copy it held are gone, the
//! database record is not. The scaled CI mode runs the storage modules of the suite on a
//! cluster of three masters with a replica each; this test starts a cluster of its own of
//! that shape so it may kill one.
use std::time::{Duration, Instant};

use api::config::RedisMode;
use serde_json::json;
use tests::{Mode, Reply, TestApp, mode, redis_cluster::PrivateRedisCluster, shop::Shop};
use uuid::Uuid;

/// Every request must end within this, whatever Redis does: the calls are bounded by
/// `redis_timeout_ms` (300 ms here).
const FAST: Duration = Duration::from_secs(2);

/// How soon payments resume after a master dies: the cluster's `cluster-node-timeout`
/// (1 s on this rig) to mark it failed, its replica's election, then the client's slot-map
/// refresh.
const FAILOVER: Duration = Duration::from_secs(10);

/// The subsystems `GET /v1/health` reports degraded.
async fn degraded(app: &TestApp) -> Vec<String> {
    let r = tests::send(app.get("/health")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["degraded_subsystems"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_run_costs_fast_retryable_errors_and_never_a_second_debit() {
    if mode() != Mode::Production {
        eprintln!("production mode only: embedded mode keeps its locks in process");
        return;
    }
    let cluster = PrivateRedisCluster::start(3, 1);
    let seeds = cluster.seeds.clone();
    let app = TestApp::spawn_with(false, |c| {
        c.redis_url = Some(seeds);
        c.redis_mode = RedisMode::Cluster;
        c.redis_timeout_ms = 300;
    })
    .await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100_000).await;

    // The master to kill holds the integration's standing, which every request of its
    // terminals reads: while it is down, the whole integration is refused. The first
    // payment's idempotency lock and response copy live there too.
    let prefix = app.server.state.config.redis_prefix.clone();
    let standing = format!(
        "{prefix}{}",
        api::domain::credentials::standing::entry(shop.tenant.integration_id)
    );
    let victim = cluster.master_of_slot(cluster.slot_of(&standing));
    let (key, tagged) = loop {
        let key = Uuid::new_v4().to_string();
        let tagged = format!(
            "{prefix}{}",
            api::idempotency::copy_key(shop.tenant.integration_id, &key)
        );
        if cluster.master_of_slot(cluster.slot_of(&tagged)) == victim {
            break (key, tagged);
        }
    };
    let body = json!({"credential": {"type": "qr", "qr_payload": shop.qr(&c).await},
        "amount_minor": 700, "currency": "EUR", "order_ref": "R-1"});
    let first = shop.post_with_key("/payments", body.clone(), &key).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(degraded(&app).await, Vec::<String>::new());

    cluster.kill(victim);
    let killed = Instant::now();
    // At once, before the cluster notices: the retry's lock is on a dead node.
    let during = shop.post_with_key("/payments", body.clone(), &key).await;
    assert!(killed.elapsed() < FAST, "{:?}", killed.elapsed());
    assert_eq!(during.status, 503, "{}", during.body);
    assert_eq!(during.body["error"]["details"]["retryable"], true);
    // Health says so, every time it is asked (a PING to one node at random did not).
    for _ in 0..5 {
        assert_eq!(degraded(&app).await, ["redis"], "one master is down");
    }

    // Payments go on while the replica takes over: each retried with its own key until it
    // is taken, every attempt answered fast, with a payment or a retryable 503.
    let mut refused = 1;
    let mut paid = Vec::new();
    let mut last_refusal = killed;
    for i in 0..12 {
        let key = Uuid::new_v4().to_string();
        let before = refused;
        let qr = taken(&format!("mint {i}"), &mut refused, || {
            shop.post("/qr/mint", json!({"wallet_user_id": c.wallet_user_id}))
        })
        .await;
        let body = json!({"credential": {"type": "qr", "qr_payload": qr.body["data"]["qr_payload"]},
            "amount_minor": 100, "currency": "EUR", "order_ref": format!("R-{i}")});
        let r = taken(&format!("payment {i}"), &mut refused, || {
            shop.post_with_key("/payments", body.clone(), &key)
        })
        .await;
        if refused > before {
            last_refusal = Instant::now();
        }
        paid.push(r.body["data"]["payment_id"].clone());
    }
    let resumed_after = last_refusal.duration_since(killed);
    eprintln!(
        "redis failover: payments resumed {resumed_after:?} after the master was killed ({refused} attempts refused meanwhile)"
    );
    assert!(
        resumed_after < FAILOVER,
        "payments resume within {FAILOVER:?} of a master's death: {resumed_after:?}"
    );
    cluster.wait_ok(Duration::from_secs(20));
    let healthy = Instant::now() + Duration::from_secs(10);
    while !degraded(&app).await.is_empty() {
        assert!(
            Instant::now() < healthy,
            "health says Redis is well once a replica took over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(
        cluster.master_of_slot(cluster.slot_of(&tagged)),
        victim,
        "a replica took the dead master's slots"
    );

    // The payment made before the kill: its copy died with the master, its record did
    // not. The retry replays it, byte for byte, and debits nothing more.
    let replay = loop {
        let r = shop.post_with_key("/payments", body.clone(), &key).await;
        if r.status != 503 {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(replay.status, 200, "{}", replay.body);
    assert_eq!(
        replay.text(),
        first.as_replayed(),
        "the stored response, byte for byte, marked replayed"
    );
    paid.sort_by_key(|p| p.to_string());
    paid.dedup();
    assert_eq!(paid.len(), 12, "twelve payments, each once");
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        100_000 - 700 - 12 * 100,
        "{refused} attempts were refused on the way; none debited"
    );
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

/// `attempt` repeated until it answers 200: every answer within `FAST`, and any other than
/// 200 a retryable 503 (counted in `refused`).
async fn taken<F, Fut>(what: &str, refused: &mut u32, mut attempt: F) -> Reply
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Reply>,
{
    loop {
        let started = Instant::now();
        let r = attempt().await;
        assert!(started.elapsed() < FAST, "{what}: {:?}", started.elapsed());
        match r.status {
            200 => return r,
            503 => {
                assert_eq!(
                    r.body["error"]["details"]["retryable"], true,
                    "{what}: {}",
                    r.body
                );
                *refused += 1;
            }
            s => panic!("{what}: {s} {}", r.body),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
