//! The service's processes started on one host the way the README shows them, with no
//! listener settings at all: production's `wallet-api serve` beside `wallet-worker run`,
//! and in embedded mode a second `wallet-api` beside the first. Each binary has a metrics
//! port of its own, so both stay up; a setting that names a port another process holds
//! stops the process with a message naming that setting.
use std::time::Duration;

use serde_json::json;
use tests::{
    Mode, TestApp, mode,
    procs::{Process, free_port, service_env, wait_for_port},
};
use uuid::Uuid;

fn scratch_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("wallet-{what}-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn log_of(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits up to `within` for `p` to exit by itself, then returns what it logged.
fn exits_saying(p: &mut Process, log: &std::path::Path, within: Duration) -> String {
    let start = std::time::Instant::now();
    while p.is_running() {
        assert!(
            start.elapsed() < within,
            "the process kept running: {}",
            log_of(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    log_of(log)
}

/// Nothing listens on 127.0.0.1:8080, the default public address these tests start on.
fn default_port_is_free() {
    assert!(
        std::net::TcpListener::bind("127.0.0.1:8080").is_ok(),
        "127.0.0.1:8080 is taken on this machine; this test starts the service on its defaults"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_a_worker_on_one_host_both_start_with_no_listener_settings() {
    if mode() != Mode::Production {
        return the_second_embedded_server_on_a_host_starts_beside_the_first().await;
    }
    default_port_is_free();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let setup = TestApp::spawn().await;
    let tests::shop::ReadyToPay {
        shop, receiver, qr, ..
    } = tests::shop::ready_to_pay(&setup).await;

    let dir = scratch_dir("one-host");
    let mut env = service_env(&tests::test_config());
    env.extend(
        [
            ("WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
            ("WALLET_OUTBOX_POLL_MS", "50"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let (api_log, worker_log) = (dir.join("api.log"), dir.join("worker.log"));
    let mut api = Process::start("wallet-api", &["serve"], &env, &api_log);
    let mut worker = Process::start("wallet-worker", &["run"], &env, &worker_log);
    wait_for_port(8080, Duration::from_secs(60));
    // Each on its own documented metrics port.
    wait_for_port(9091, Duration::from_secs(30));
    wait_for_port(9092, Duration::from_secs(30));
    let client = reqwest::Client::new();
    let worker_health = client
        .get("http://127.0.0.1:9092/health")
        .send()
        .await
        .unwrap();
    assert_eq!(worker_health.status(), 200, "the worker's probe answers");
    let api_metrics = client
        .get("http://127.0.0.1:9091/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(api_metrics.contains("wallet_build_info"), "{api_metrics}");

    let paid = client
        .post("http://127.0.0.1:8080/v1/payments")
        .bearer_auth(&shop.token)
        .header("Idempotency-Key", Uuid::new_v4().to_string())
        .json(&shop.body(json!({
            "credential": {"type": "qr", "qr_payload": qr},
            "amount_minor": 10, "currency": "EUR", "order_ref": "ONE-HOST",
        })))
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    // The worker process relays and delivers it.
    tests::eventually(Duration::from_secs(30), "the webhook delivery", || async {
        receiver.received().into_iter().next()
    })
    .await;
    assert!(api.is_running(), "the API stayed up: {}", log_of(&api_log));
    assert!(
        worker.is_running(),
        "the worker stayed up: {}",
        log_of(&worker_log)
    );

    // A setting that names a port another process holds stops the process, naming it.
    let mut taken = env.clone();
    taken.push(("WALLET_METRICS_LISTEN_ADDR".into(), "127.0.0.1:9091".into()));
    let third_log = dir.join("third.log");
    let mut third = Process::start("wallet-worker", &["run"], &taken, &third_log);
    let said = exits_saying(&mut third, &third_log, Duration::from_secs(30));
    assert!(
        said.contains("WALLET_METRICS_LISTEN_ADDR") && said.contains("127.0.0.1:9091"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Embedded mode: a developer starts a second server on another public port, with its own
/// data directory and nothing else set. It starts, its metrics on a free port it logs; one
/// started on the first's public address stops at once, naming `WALLET_LISTEN_ADDR`.
async fn the_second_embedded_server_on_a_host_starts_beside_the_first() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    default_port_is_free();
    let (first_dir, second_dir) = (scratch_dir("first"), scratch_dir("second"));
    let embedded = |dir: &std::path::Path| {
        vec![
            ("WALLET_DATA_DIR".to_string(), dir.display().to_string()),
            ("WALLET_BCRYPT_COST".to_string(), "10".to_string()),
        ]
    };
    let first_log = first_dir.join("api.log");
    let mut first = Process::start("wallet-api", &["serve"], &embedded(&first_dir), &first_log);
    wait_for_port(8080, Duration::from_secs(60));
    wait_for_port(9091, Duration::from_secs(30));

    let port = free_port();
    let mut env = embedded(&second_dir);
    env.push(("WALLET_LISTEN_ADDR".into(), format!("127.0.0.1:{port}")));
    let second_log = second_dir.join("api.log");
    let mut second = Process::start("wallet-api", &["serve"], &env, &second_log);
    wait_for_port(port, Duration::from_secs(60));
    let health = reqwest::get(format!("http://127.0.0.1:{port}/v1/health"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // It says where its metrics went (its start-up line follows the listeners), and they
    // are there.
    let metrics = tests::eventually(
        Duration::from_secs(30),
        "the start-up line naming the metrics address",
        || async {
            log_of(&second_log)
                .lines()
                .find_map(|l| l.split("metrics: http://").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_string)
        },
    )
    .await;
    let said = log_of(&second_log);
    assert_ne!(metrics, "127.0.0.1:9091/metrics", "{said}");
    let scraped = reqwest::get(format!("http://{metrics}")).await.unwrap();
    assert_eq!(scraped.status(), 200, "{metrics}");

    // A third on the first's public address stops, naming the setting to change.
    let third_dir = scratch_dir("third");
    let third_log = third_dir.join("api.log");
    let mut third = Process::start("wallet-api", &["serve"], &embedded(&third_dir), &third_log);
    let said = exits_saying(&mut third, &third_log, Duration::from_secs(60));
    assert!(
        said.contains("WALLET_LISTEN_ADDR") && said.contains("127.0.0.1:8080"),
        "{said}"
    );
    assert!(first.is_running() && second.is_running());
    for d in [first_dir, second_dir, third_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
}
