//! Webhooks, as the spec's "Events" section and DECISIONS.md state them: committed events
//! are POSTed signed (`Service-Signature: t=..,v1=..`), at least once, retried with backoff
//! and then dead-lettered, ordered per resource; every attempt is in the delivery history;
//! sustained failure disables the endpoint; a rotated secret signs beside the new one.
mod events;
mod ordering;
mod receivers;

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tests::{
    TestApp, eventually, send,
    shop::{Shop, subscribe},
    webhooks::{Answer, Receiver, verify},
};

async fn history(shop: &Shop<'_>, id: &str) -> Vec<Value> {
    // A retryable 503 (embedded mode's one SQLite writer under the other tests' load) is
    // retried, as the spec tells clients to.
    for _ in 0..10 {
        let r = send(
            shop.app
                .get(&format!("/webhooks/subscriptions/{id}/deliveries"))
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        if r.status == 503 && r.body["error"]["details"]["retryable"] == true {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        return r.body["data"].as_array().unwrap().clone();
    }
    panic!("the delivery history stayed unavailable");
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[tokio::test]
async fn a_payment_is_delivered_as_a_signed_envelope_that_verifies() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    let (sub, secret) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 250).await;
    let payment_id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();

    let got = eventually(Duration::from_secs(20), "the delivery", || async {
        let r = receiver.received();
        (!r.is_empty()).then(|| r[0].clone())
    })
    .await;
    verify(&got.signature, got.body.as_bytes(), &secret, now(), 300)
        .expect("the signature verifies with the subscription's secret");
    assert!(
        verify(
            &got.signature,
            got.body.as_bytes(),
            "whsec_wrong",
            now(),
            300
        )
        .is_err(),
        "and with no other secret"
    );
    let e = &got.json;
    assert_eq!(e["event_type"], "payment.completed");
    assert_eq!(e["merchant_id"], shop.merchant().to_string());
    assert_eq!(e["data"]["payment_id"], payment_id.as_str());
    assert_eq!(e["data"]["amount_minor"], 250);
    assert_eq!(e["data"]["currency"], "EUR");
    assert_eq!(e["sequence_number"], 1);
    for f in ["event_id", "occurred_at", "emitted_at"] {
        assert!(e[f].is_string(), "{f} in {e}");
    }
    assert!(e["emitted_at"].as_str() >= e["occurred_at"].as_str());

    let h = eventually(Duration::from_secs(10), "a DELIVERED record", || async {
        let h = history(&shop, &sub).await;
        (h.first().is_some_and(|d| d["state"] == "DELIVERED")).then_some(h)
    })
    .await;
    assert_eq!(h.len(), 1, "only the subscribed type: {h:?}");
    assert_eq!(h[0]["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(h[0]["attempts"][0]["status_code"], 200);
    app.stop().await;
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_the_same_event_three_times_and_history_shows_each() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::start(Arc::new(|n, _| {
        Answer::Status(if n < 2 { 500 } else { 200 })
    }))
    .await;
    let (sub, _) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;
    let got = eventually(Duration::from_secs(20), "three requests", || async {
        let r = receiver.received();
        (r.len() >= 3).then_some(r)
    })
    .await;
    let ids: Vec<String> = got.iter().map(|r| r.event_id()).collect();
    assert_eq!(ids.len(), 3);
    assert!(
        ids.iter().all(|i| *i == ids[0]),
        "the same event_id: {ids:?}"
    );
    assert_eq!(
        got.iter()
            .map(|r| r.body.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len(),
        1,
        "every attempt sends the same body"
    );
    let h = eventually(Duration::from_secs(10), "the history", || async {
        let h = history(&shop, &sub).await;
        (h.first().is_some_and(|d| d["state"] == "DELIVERED")).then_some(h)
    })
    .await;
    let attempts = h[0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[0]["status_code"], 500);
    assert_eq!(attempts[0]["succeeded"], false);
    assert!(attempts[0]["next_retry_at"].is_string());
    assert_eq!(attempts[2]["status_code"], 200);
    assert!(attempts.iter().all(|a| a["latency_ms"].is_i64()));

    // Filters: by outcome.
    let r = send(
        app.get(&format!(
            "/webhooks/subscriptions/{sub}/deliveries?outcome=DEAD"
        ))
        .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0);
    app.stop().await;
}

#[tokio::test]
async fn a_receiver_that_never_answers_in_time_is_dead_lettered_and_a_replay_delivers_it() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::start(Arc::new(|_, _| Answer::Hang(Duration::from_secs(3)))).await;
    let (sub, _) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;
    let dead = eventually(Duration::from_secs(60), "the delivery to die", || async {
        let h = history(&shop, &sub).await;
        (h.first().is_some_and(|d| d["state"] == "DEAD")).then(|| h[0].clone())
    })
    .await;
    assert_eq!(
        dead["attempts"].as_array().unwrap().len(),
        4,
        "the test schedule"
    );
    assert!(
        dead["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["error"] == "timed out")
    );

    let list = send(
        app.get(&format!(
            "/operator/dead-letters?job_type=webhook_deliver&merchant_id={}",
            shop.merchant()
        ))
        .header("x-operator-key", &shop.operator_key),
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.body);
    let letters = list.body["data"].as_array().unwrap();
    assert_eq!(
        letters.len(),
        1,
        "the delivery is dead-lettered: {}",
        list.body
    );
    let letter = letters[0].clone();
    assert_eq!(letter["attempts"], 4);

    receiver.answer_with(Arc::new(|_, _| Answer::Status(200)));
    let id = letter["dead_letter_id"].as_str().unwrap().to_string();
    let r = shop
        .operator(
            &format!("/operator/dead-letters/{id}/replay"),
            json!({"reason": "endpoint fixed"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    eventually(Duration::from_secs(20), "the replayed delivery", || async {
        let h = history(&shop, &sub).await;
        (h[0]["state"] == "DELIVERED").then_some(())
    })
    .await;
    assert_eq!(receiver.accepted_event_ids().len(), 1);
    // Replaying the same letter again changes nothing: it delivered once more, not twice.
    let again = shop
        .operator(
            &format!("/operator/dead-letters/{id}/replay"),
            json!({"reason": "again"}),
        )
        .await;
    assert_eq!(again.body["data"]["outcome"], "unchanged", "{}", again.body);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let accepted = receiver
        .received()
        .iter()
        .filter(|r| r.answered == 200)
        .count();
    assert_eq!(accepted, 1);
    app.stop().await;
}

#[tokio::test]
async fn a_partner_redelivers_one_event_or_every_failed_one_since_a_time() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    let (sub, _) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;
    let delivered = eventually(Duration::from_secs(20), "the delivery", || async {
        let h = history(&shop, &sub).await;
        (h.first().is_some_and(|d| d["state"] == "DELIVERED")).then(|| h[0].clone())
    })
    .await;
    let did = delivered["delivery_id"].as_str().unwrap();
    let r = send(
        app.post(&format!(
            "/webhooks/subscriptions/{sub}/deliveries/{did}/redeliver"
        ))
        .header("x-api-key", &shop.tenant.platform_key)
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .json(&shop.body(json!({}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = eventually(Duration::from_secs(20), "the redelivery", || async {
        let r = receiver.received();
        (r.len() >= 2).then_some(r)
    })
    .await;
    assert_eq!(got[0].event_id(), got[1].event_id(), "the same event again");

    // Nothing failed since: redeliver-all sends nothing.
    let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let r = send(
        app.post(&format!("/webhooks/subscriptions/{sub}/redeliver"))
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&shop.body(json!({"since": since}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["redelivered"], 0);

    // A second rotation inside the first one's grace period would drop a live secret.
    let rotate = || {
        send(
            app.post(&format!("/webhooks/subscriptions/{sub}/rotate-secret"))
                .header("x-api-key", &shop.tenant.platform_key)
                .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                .json(&shop.body(json!({}))),
        )
    };
    assert_eq!(rotate().await.status, 200);
    let second = rotate().await;
    assert_eq!((second.status, second.code()), (409, "CONFLICT"));
    app.stop().await;
}

#[tokio::test]
async fn sustained_failure_disables_the_endpoint_and_enabling_replays_what_was_missed() {
    let app = TestApp::spawn_isolated(true, |cfg| {
        cfg.webhook_disable_after_failures = 3;
        cfg.webhook_disable_after_secs = 0;
        cfg.webhook_max_attempts = 10;
    })
    .await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::start(Arc::new(|_, _| Answer::Status(503))).await;
    let (sub, _) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;
    let subs = eventually(Duration::from_secs(20), "auto-disable", || async {
        let r = send(
            app.get("/webhooks/subscriptions")
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        let s = r.body["data"][0].clone();
        (s["state"] == "DISABLED").then_some(s)
    })
    .await;
    assert_eq!(subs["disabled_reason"], "failing");
    let seen = receiver.received().len();
    assert_eq!(seen, 3, "nothing after the threshold");

    // While disabled nothing is sent; the event is kept.
    shop.pay(&c, 100).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.received().len(), seen);

    receiver.answer_with(Arc::new(|_, _| Answer::Status(200)));
    let r = send(
        app.post(&format!("/webhooks/subscriptions/{sub}/enable"))
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&shop.body(json!({"replay_missed": true}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["subscription"]["state"], "ACTIVE");
    assert_eq!(r.body["data"]["missed_deliveries"], 2);
    assert_eq!(r.body["data"]["replayed_deliveries"], 2);
    eventually(Duration::from_secs(20), "both events", || async {
        (receiver.accepted_event_ids().len() == 2).then_some(())
    })
    .await;
    app.stop().await;
}

/// A partner disables its endpoint: nothing is sent while it is disabled, disabling it again
/// changes nothing, and enabling it without `replay_missed` resumes with later events only
/// (the missed one is counted, not sent).
#[tokio::test]
async fn a_disabled_endpoint_is_sent_nothing_and_enabling_resumes_with_later_events() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    let (sub, _) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let path = |action: &str| format!("/webhooks/subscriptions/{sub}/{action}");
    let r = shop.control(&path("disable"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (&r.body["data"]["state"], &r.body["data"]["disabled_reason"]),
        (&json!("DISABLED"), &json!("manual"))
    );
    let again = shop.control(&path("disable"), json!({})).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["data"]["state"], "DISABLED");

    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(receiver.received().is_empty(), "sent while disabled");

    let r = shop
        .control(&path("enable"), json!({"replay_missed": false}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["subscription"]["state"], "ACTIVE");
    assert_eq!(
        (
            &r.body["data"]["missed_deliveries"],
            &r.body["data"]["replayed_deliveries"]
        ),
        (&json!(1), &json!(0))
    );
    let later = shop.pay(&c, 100).await;
    let got = eventually(Duration::from_secs(20), "the later payment", || async {
        let got = receiver.received();
        (!got.is_empty()).then_some(got)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.received().len(), 1, "only the later event");
    assert_eq!(
        got[0].json["data"]["payment_id"],
        later.body["data"]["payment_id"]
    );
    app.stop().await;
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_new_one_during_the_grace_period() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    let (sub, old) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let r = send(
        app.post(&format!("/webhooks/subscriptions/{sub}/rotate-secret"))
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&shop.body(json!({"grace_period_secs": 3600}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let new = r.body["data"]["secret"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert!(r.body["data"]["subscription"]["previous_secret_expires_at"].is_string());

    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;
    let got = eventually(Duration::from_secs(20), "the delivery", || async {
        receiver.received().first().cloned()
    })
    .await;
    assert_eq!(got.signature.matches("v1=").count(), 2, "{}", got.signature);
    verify(&got.signature, got.body.as_bytes(), &new, now(), 300).expect("new secret");
    verify(&got.signature, got.body.as_bytes(), &old, now(), 300).expect("old secret");
    assert!(
        verify(&got.signature, got.body.as_bytes(), &new, now() + 301, 300).is_err(),
        "a stale timestamp is rejected"
    );
    app.stop().await;
}

#[tokio::test]
async fn endpoints_on_private_addresses_and_plain_http_are_refused_in_production() {
    let app = TestApp::spawn_with(false, |cfg| cfg.webhook_allow_private_targets = false).await;
    let shop = Shop::open(&app).await;
    for url in [
        "http://127.0.0.1:9/hooks",
        "https://169.254.169.254/latest/meta-data",
        "https://10.1.2.3/hooks",
        "ftp://example.com/hooks",
        "not a url",
    ] {
        let r = shop
            .control("/webhooks/subscriptions", json!({"url": url}))
            .await;
        assert_eq!(r.code(), "VALIDATION_ERROR", "{url}: {}", r.body);
        assert!(
            r.field_issues().iter().any(|(f, _)| f == "/url"),
            "{url}: {}",
            r.body
        );
    }
    let r = shop
        .control(
            "/webhooks/subscriptions",
            json!({"url": "https://example.com/hooks", "event_types": ["payment.exploded"]}),
        )
        .await;
    assert!(
        r.field_issues().iter().any(|(f, _)| f == "/event_types/0"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn another_integrations_subscription_does_not_exist_for_this_one() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let (sub, _) = subscribe(&shop, "http://127.0.0.1:9/hooks", Value::Null).await;
    let r = send(
        app.get(&format!("/webhooks/subscriptions/{sub}/deliveries"))
            .header("x-api-key", &other.tenant.platform_key),
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
    let r = send(
        app.get("/webhooks/subscriptions")
            .header("x-api-key", &other.tenant.platform_key),
    )
    .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0);
}
