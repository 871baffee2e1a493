//! A `wallet-worker` killed (SIGKILL) while a webhook delivery is in flight loses nothing:
//! the job it held is abandoned, another worker picks it up once the dead one misses its
//! heartbeats, and the event is delivered. Production mode only: there the worker is a
//! process of its own (embedded mode runs the jobs inside the API process).
use std::{
    process::{Child, Command},
    sync::Arc,
    time::Duration,
};

use serde_json::json;
use tests::{
    Mode, TestApp, eventually, mode, send,
    shop::Shop,
    webhooks::{Answer, Receiver},
};

/// A worker process, SIGKILLed when dropped: a failing test leaves none behind.
struct Worker(Child);

impl Worker {
    /// SIGKILL, and reap.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn worker(app: &TestApp) -> Worker {
    let cfg = &app.server.state.config;
    let mut cmd = tests::against_this_run(Command::new(env!("CARGO_BIN_EXE_wallet-worker")));
    cmd.arg("run")
        .env(
            "WALLET_DATABASE_URL",
            cfg.database_url.as_deref().unwrap_or_default(),
        )
        .env("WALLET_REDIS_PREFIX", &cfg.redis_prefix)
        .env("WALLET_METRICS_LISTEN_ADDR", "127.0.0.1:0")
        .env("WALLET_JOB_HEARTBEAT_SECS", "1")
        .env("WALLET_WEBHOOK_TIMEOUT_MS", "20000")
        .env("WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")
        .env("WALLET_OUTBOX_POLL_MS", "50")
        .stdout(match std::env::var("KILL_TEST_LOG") {
            Ok(path) => std::process::Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("log file"),
            ),
            Err(_) => std::process::Stdio::null(),
        })
        .stderr(std::process::Stdio::null());
    Worker(cmd.spawn().expect("wallet-worker starts"))
}

/// A receiver whose first request hangs (its worker is killed meanwhile), the rest 200.
async fn hanging_first(hang: Duration) -> Receiver {
    Receiver::start(Arc::new(move |n, _| {
        if n == 0 {
            Answer::Hang(hang)
        } else {
            Answer::Status(200)
        }
    }))
    .await
}

/// Subscribes `receiver` to `event_type`; returns the subscription id.
async fn subscribe(shop: &Shop<'_>, receiver: &Receiver, event_type: &str) -> String {
    let r = shop
        .control(
            "/webhooks/subscriptions",
            json!({"url": receiver.url, "event_types": [event_type]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["subscription"]["subscription_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_worker_killed_mid_delivery_loses_nothing() {
    if mode() != Mode::Production {
        return;
    }
    // A database of its own: no other test's worker may take this job.
    let app = TestApp::spawn_isolated(false, |_| {}).await;
    let shop = Shop::open(&app).await;
    // The first request is never answered: the worker is killed while it waits.
    let receiver = hanging_first(Duration::from_secs(60)).await;
    let sub = subscribe(&shop, &receiver, "payment.completed").await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;

    let mut first = worker(&app);
    eventually(
        Duration::from_secs(30),
        "the delivery in flight",
        || async { (!receiver.received().is_empty()).then_some(()) },
    )
    .await;
    first.kill();

    let mut second = worker(&app);
    let delivered = eventually(Duration::from_secs(60), "the delivery", || async {
        let r = send(
            app.get(&format!("/webhooks/subscriptions/{sub}/deliveries"))
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        let d = r.body["data"][0].clone();
        (d["state"] == "DELIVERED").then_some(d)
    })
    .await;
    second.kill();
    assert_eq!(receiver.accepted_event_ids().len(), 1);
    assert_eq!(
        receiver.received()[0].event_id(),
        delivered["event_id"].as_str().unwrap(),
        "the event the killed worker was sending"
    );
    app.stop().await;
}

/// Issue 25, point 6: events of one resource wait, in order, for the one a killed worker
/// was sending. Once another worker picks that one up (within the heartbeat window), the
/// chain behind it follows at once rather than one event per deferral look (up to ten
/// seconds apart each: 161 events once took six minutes).
#[tokio::test]
async fn a_chain_behind_a_killed_workers_delivery_resumes_within_the_heartbeat_window() {
    if mode() != Mode::Production {
        return;
    }
    let app = TestApp::spawn_isolated(false, |_| {}).await;
    let shop = Shop::open(&app).await;
    let receiver = hanging_first(Duration::from_secs(120)).await;
    subscribe(&shop, &receiver, "wallet.balance_changed").await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;

    let mut first = worker(&app);
    eventually(
        Duration::from_secs(30),
        "the head of the chain in flight",
        || async { (!receiver.received().is_empty()).then_some(()) },
    )
    .await;
    const BEHIND: usize = 30;
    for _ in 0..BEHIND {
        assert_eq!(shop.pay(&c, 10).await.status, 200);
    }
    // Long enough for every waiting event to have been put off several times (its looks
    // are then up to ten seconds apart), short of the head's 20-second send timeout: the
    // head is still in flight when its worker dies.
    tokio::time::sleep(Duration::from_secs(14)).await;
    assert_eq!(receiver.received().len(), 1, "nothing overtook the head");
    first.kill();
    let killed_at = std::time::Instant::now();

    let mut second = worker(&app);
    eventually(Duration::from_secs(120), "the whole chain", || async {
        (receiver.accepted_event_ids().len() == BEHIND + 1).then_some(())
    })
    .await;
    let took = killed_at.elapsed();
    second.kill();
    // Heartbeat 1 s: the dead worker's delivery is free after 3 s, seen at the next beat.
    assert!(
        took < Duration::from_secs(12),
        "the chain resumed {took:?} after the kill"
    );
    // In the resource's order.
    let seqs: Vec<i64> = receiver
        .received()
        .iter()
        .filter(|r| r.answered == 200)
        .map(|r| r.json["sequence_number"].as_i64().unwrap())
        .collect();
    let mut sorted = seqs.clone();
    sorted.sort();
    assert_eq!(seqs, sorted, "per-resource order");
    eprintln!("chain of {} resumed {took:?} after the kill", BEHIND + 1);
    app.stop().await;
}
