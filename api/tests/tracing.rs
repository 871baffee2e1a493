//! Distributed tracing, as production runs it: `wallet-api` and `wallet-worker` as separate
//! processes (embedded mode: one API process running its jobs) export spans over OTLP to a
//! stand-in collector. One payment sent with a W3C `traceparent` is one trace, from the
//! request through its transaction, the outbox relay and the worker to the webhook
//! delivery, and the receiver gets that trace in its own `traceparent`. A job's log lines
//! carry the id of the request that caused it.
use std::time::Duration;

use serde_json::json;
use tests::{
    Mode, TestApp, mode,
    otlp::Collector,
    procs::{Process, free_port, wait_for_port},
};
use uuid::Uuid;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_request_through_the_worker_to_the_webhook_receiver() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The tenant, its customer and a webhook endpoint, set up in-process (no workers here:
    // the processes under test do the relaying and delivering).
    let setup = TestApp::spawn().await;
    let tests::shop::ReadyToPay {
        shop,
        receiver,
        customer: c,
        qr,
    } = tests::shop::ready_to_pay(&setup).await;

    let collector = Collector::start().await;
    let cfg = tests::test_config();
    let dir = std::env::temp_dir().join(format!("wallet-tracing-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let production = mode() == Mode::Production;
    let mut env = tests::procs::service_env(&cfg);
    env.extend(
        [
            ("WALLET_LOG_FORMAT", "json"),
            ("WALLET_METRICS_LISTEN_ADDR", "127.0.0.1:0"),
            ("WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
            ("WALLET_OUTBOX_POLL_MS", "50"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            // Export within a tenth of a second: the processes are killed at the end.
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut api_env = env.clone();
    api_env.push(("WALLET_LISTEN_ADDR".into(), format!("127.0.0.1:{port}")));
    api_env.push(("WALLET_RUN_WORKERS".into(), (!production).to_string()));
    let api_log = dir.join("api.log");
    let worker_log = dir.join("worker.log");
    let _api = Process::start("wallet-api", &["serve"], &api_env, &api_log);
    let _worker = production.then(|| Process::start("wallet-worker", &["run"], &env, &worker_log));
    wait_for_port(port, Duration::from_secs(60));

    // The payment, as the caller's span 00f067aa0ba902b7 of its trace.
    let client = reqwest::Client::new();
    let incoming = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let paid = client
        .post(format!("http://127.0.0.1:{port}/v1/payments"))
        .bearer_auth(&shop.token)
        .header("Idempotency-Key", Uuid::new_v4().to_string())
        .header("traceparent", &incoming)
        .json(&shop.body(json!({
            "credential": {"type": "qr", "qr_payload": qr},
            "amount_minor": 10, "currency": "EUR", "order_ref": "TRACED",
        })))
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    let returned = paid.headers()["traceparent"].to_str().unwrap().to_string();
    let request_id = paid.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(
        returned.starts_with(&format!("00-{TRACE_ID}-")) && !returned.contains(CALLER_SPAN),
        "the response names the server's span in the caller's trace: {returned}"
    );

    // The receiver gets the delivery in the same trace.
    // (The payment is the only one of this endpoint's merchant.)
    let delivered = tests::eventually(Duration::from_secs(30), "the delivery", || async {
        receiver.received().into_iter().next()
    })
    .await;
    let sent = delivered
        .traceparent
        .expect("the delivery carries a traceparent");
    assert!(sent.starts_with(&format!("00-{TRACE_ID}-")), "{sent}");

    // The collector has the whole trace: the request and its transaction on the API, the
    // relay, the job and the delivery where the jobs run.
    let jobs_service = if production {
        "wallet-worker"
    } else {
        "wallet-api"
    };
    let trace = tests::eventually(Duration::from_secs(30), "the exported trace", || async {
        let t = collector.trace(TRACE_ID);
        let has =
            |service: &str, name: &str| t.iter().any(|s| s.service == service && s.name == name);
        (has("wallet-api", "POST /v1/payments")
            && has("wallet-api", "transaction")
            && has(jobs_service, "outbox_relay")
            && has(jobs_service, "job webhook_batch")
            && has(jobs_service, "webhook delivery"))
        .then_some(t)
    })
    .await;
    // Every link of the chain under the one trace, each the child of the one before:
    // caller → request → transaction → relay → batch job → delivery.
    let one = |name: &str| {
        let found: Vec<_> = trace.iter().filter(|s| s.name == name).collect();
        assert!(!found.is_empty(), "{name} in {trace:#?}");
        found
    };
    let server = one("POST /v1/payments")[0];
    assert_eq!(
        server.parent_span_id, CALLER_SPAN,
        "the server span's parent is the caller's"
    );
    assert!(returned.contains(&server.span_id));
    let transaction = one("transaction")[0];
    assert_eq!(transaction.parent_span_id, server.span_id, "{trace:#?}");
    let relays = one("outbox_relay");
    for relay in &relays {
        assert_eq!(
            relay.parent_span_id, transaction.span_id,
            "the relay continues from the transaction that wrote the row: {trace:#?}"
        );
    }
    let job = one("job webhook_batch")[0];
    assert!(
        relays.iter().any(|r| r.span_id == job.parent_span_id),
        "the batch job continues from the relay that queued it: {trace:#?}"
    );
    let delivery = one("webhook delivery")[0];
    assert_eq!(
        delivery.parent_span_id, job.span_id,
        "the delivery is the batch job's: {trace:#?}"
    );
    assert!(
        sent.contains(&delivery.span_id),
        "the receiver's parent is the delivery span"
    );
    assert!(
        delivery
            .attributes
            .iter()
            .any(|(k, v)| k == "request_id" && *v == request_id),
        "{:?}",
        delivery.attributes
    );
    let posts = collector.posts();
    assert!(
        posts.iter().all(|p| p == "/v1/traces application/json"),
        "{posts:?}"
    );

    // A job's log lines name the request that caused it: the OTP's SMS job.
    let otp_request = format!("req_traced{}", Uuid::new_v4().simple());
    let sent_otp = client
        .post(format!("http://127.0.0.1:{port}/v1/payments/otp/send"))
        .bearer_auth(&shop.token)
        .header("Idempotency-Key", Uuid::new_v4().to_string())
        .header("x-request-id", &otp_request)
        .json(&shop.body(json!({
            "phone": c.phone, "amount_minor": 10, "currency": "EUR", "order_ref": "TRACED-OTP",
        })))
        .send()
        .await
        .unwrap();
    assert_eq!(sent_otp.status(), 200);
    let jobs_log = if production { &worker_log } else { &api_log };
    tests::eventually(
        Duration::from_secs(30),
        "the SMS job's log line",
        || async {
            let text = std::fs::read_to_string(jobs_log).unwrap_or_default();
            text.lines()
                .find(|l| {
                    l.contains("sms sent")
                        && l.contains(&format!("\"request_id\":\"{otp_request}\""))
                })
                .map(|_| ())
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
