//! What an operator reads: metrics on their own listener, in the Prometheus conventions,
//! labelled by route template; the catalogue the chart and the docs rely on matches them.
use std::collections::BTreeMap;

use api::infra::telemetry::metrics::{self as m, CATALOGUE, Kind};
use serde_json::json;
use tests::{TestApp, send, shop::Shop, webhooks::Receiver};
use uuid::Uuid;

async fn scrape(app: &TestApp) -> String {
    let r = reqwest::get(format!("http://{}/metrics", app.server.metrics_addr))
        .await
        .expect("the metrics listener answers");
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
    );
    r.text().await.unwrap()
}

/// `# TYPE` of every family in a scrape, and the families that have a `# HELP`.
fn families(text: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut types = BTreeMap::new();
    let mut helped = vec![];
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.push(rest.split_once(' ').unwrap().0.to_string());
        }
    }
    (types, helped)
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
    }
}

#[tokio::test]
async fn metrics_are_served_apart_from_the_api_with_help_type_and_route_templates() {
    let app = TestApp::spawn_isolated(true, |_| {}).await;
    let shop = Shop::open(&app).await;

    // Not on the public listener, where an Ingress could expose it.
    let public = send(app.client.get(format!("{}/metrics", app.server.url()))).await;
    assert_eq!(public.status, 404);

    let missing = Uuid::new_v4();
    let r = send(
        app.get(&format!("/payments/{missing}"))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.status, 404);

    let expected = [
        m::HTTP_REQUEST_DURATION,
        m::HTTP_IN_FLIGHT,
        m::DB_POOL_CONNECTIONS,
        m::DB_POOL_MAX,
        m::DB_POOL_ACQUIRE,
        m::SUBSYSTEM_UP,
        m::BUILD_INFO,
        m::JOB_QUEUE_DEPTH,
        m::DEAD_LETTERS,
        m::OUTBOX_PENDING,
        m::OUTBOX_OLDEST_AGE,
        m::RETENTION_LAST_SUCCESS,
    ];
    let text = tests::eventually(
        std::time::Duration::from_secs(20),
        "the samplers' gauges",
        || async {
            let text = scrape(&app).await;
            let (types, _) = families(&text);
            expected
                .iter()
                .all(|f| types.contains_key(*f))
                .then_some(text)
        },
    )
    .await;
    let (types, helped) = families(&text);
    for (name, kind) in &types {
        let Some(entry) = CATALOGUE.iter().find(|c| c.0 == name) else {
            panic!("{name} is not in the catalogue (infra/telemetry/metrics.rs)");
        };
        assert_eq!(kind, kind_name(entry.1), "{name}");
        assert!(helped.contains(name), "{name} has no HELP line");
        if kind == "counter" {
            assert!(name.ends_with("_total"), "{name}");
        }
    }
    if tests::mode() == tests::Mode::Production {
        assert!(types.contains_key(m::REDIS_COMMAND_DURATION), "{text}");
    }

    // One series per route template and status class, never per id or per status code.
    assert!(
        text.contains(
            "wallet_http_request_duration_seconds_count{route=\"/v1/payments/{id}\",method=\"GET\",status_class=\"4xx\"}"
        ),
        "{text}"
    );
    assert!(!text.contains(&missing.to_string()));
    assert!(!text.contains("status=\"404\""));
    assert!(text.contains("wallet_db_pool_connections{state=\"in_use\"}"));
    assert!(text.contains("wallet_job_queue_depth{job_type=\"sms_send\",status=\"pending\"}"));
    app.stop().await;
}

#[tokio::test]
async fn a_delivered_webhook_carries_the_callers_trace_and_is_counted_by_outcome() {
    let app = TestApp::spawn_isolated(true, |_| {}).await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    tests::shop::subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 100).await;
    assert_eq!(shop.pay(&c, 10).await.status, 200);
    tests::eventually(
        std::time::Duration::from_secs(30),
        "the delivery",
        || async { (!receiver.accepted_event_ids().is_empty()).then_some(()) },
    )
    .await;
    let text = scrape(&app).await;
    assert!(
        text.contains(
            "wallet_webhook_delivery_attempts_total{outcome=\"success\",endpoint_health=\"healthy\"}"
        ),
        "{text}"
    );
    assert!(text.contains("wallet_webhook_delivery_duration_seconds_bucket{outcome=\"success\""));
    assert!(
        text.contains(
            "wallet_job_run_duration_seconds_count{job_type=\"sms_send\",outcome=\"success\"}"
        ) || text.contains(
            "wallet_job_run_duration_seconds_count{job_type=\"webhook_batch\",outcome=\"success\"}"
        ),
        "{text}"
    );
    assert!(text.contains("wallet_outbox_relayed_total"));
    app.stop().await;
}

/// The chart's alerts and dashboard, and the operator's docs, name the same families the
/// service exposes.
#[test]
fn the_catalogue_the_chart_and_the_docs_name_the_same_families() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let names: std::collections::BTreeSet<&str> = CATALOGUE.iter().map(|c| c.0).collect();
    let chart = std::fs::read_to_string(root.join("helm/metrics-catalogue.txt"))
        .expect("helm/metrics-catalogue.txt");
    let charted: std::collections::BTreeSet<&str> = chart
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(charted, names, "helm/metrics-catalogue.txt");
    let doc = std::fs::read_to_string(root.join("docs/operations/metrics.md"))
        .expect("docs/operations/metrics.md");
    for name in names {
        assert!(
            doc.contains(&format!("`{name}`")),
            "{name} is not in docs/operations/metrics.md"
        );
    }
}
