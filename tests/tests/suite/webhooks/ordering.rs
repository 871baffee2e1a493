//! Order and exactly-once: a resource's events arrive in sequence, once each, across
//! retries, batches and failed workers.
use std::{sync::Arc, time::Duration};

use super::*;
use serde_json::json;
use tests::{
    TestApp, eventually,
    shop::Shop,
    webhooks::{Answer, Receiver},
};

/// A customer's payment of 300, then `refunds` refunds of 100 each: events of one resource
/// (the payment) with sequence numbers 1, 2, ... Returns the payment's id.
async fn paid_then_refunded(shop: &Shop<'_>, refunds: usize) -> String {
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 300).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let pid = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..refunds {
        let r = shop
            .post(
                &format!("/payments/{pid}/refund"),
                json!({"amount_minor": 100, "reason": "test"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    pid
}

#[tokio::test]
async fn a_later_event_of_a_resource_waits_for_the_earlier_one_across_retries() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    // The first event (payment.completed) fails twice; the refund that follows must not
    // overtake it.
    let receiver = Receiver::start(Arc::new(|n, body| {
        let failing = body["event_type"] == "payment.completed" && n < 2;
        Answer::Status(if failing { 500 } else { 200 })
    }))
    .await;
    let (sub, _) = subscribe(
        &shop,
        &receiver.url,
        json!(["payment.completed", "payment.refunded"]),
    )
    .await;
    paid_then_refunded(&shop, 1).await;
    let got = eventually(Duration::from_secs(20), "both events", || async {
        let ok: Vec<_> = receiver
            .received()
            .into_iter()
            .filter(|r| r.answered == 200)
            .collect();
        (ok.len() >= 2).then_some(receiver.received())
    })
    .await;
    let order: Vec<(String, i64)> = got
        .iter()
        .map(|r| {
            (
                r.json["event_type"].as_str().unwrap().to_string(),
                r.json["sequence_number"].as_i64().unwrap(),
            )
        })
        .collect();
    let first_refund = order
        .iter()
        .position(|(t, _)| t == "payment.refunded")
        .unwrap();
    let completed_ok = got
        .iter()
        .position(|r| r.json["event_type"] == "payment.completed" && r.answered == 200)
        .unwrap();
    assert!(
        first_refund > completed_ok,
        "the refund came only after the completion was accepted: {order:?}"
    );
    assert!(history(&shop, &sub).await.len() == 2);
    app.stop().await;
}

/// A resource's later event waiting behind a failing one goes as soon as the earlier one
/// is accepted, not at its own next look, which by then is seconds away (its waits double
/// from 1 s to 10 s).
#[tokio::test]
async fn a_waiting_event_goes_as_soon_as_the_one_it_waits_for_is_accepted() {
    // Retries a second or two apart, so the completion is still failing, not dead, when
    // the receiver starts to accept it.
    let app = TestApp::spawn_with(true, |cfg| {
        cfg.webhook_max_attempts = 500;
        cfg.webhook_backoff_base_ms = 2_000;
        cfg.webhook_backoff_max_ms = 2_000;
    })
    .await;
    let shop = Shop::open(&app).await;
    let failing = |_: usize, body: &Value| {
        Answer::Status(if body["event_type"] == "payment.completed" {
            500
        } else {
            200
        })
    };
    let receiver = Receiver::start(Arc::new(failing)).await;
    subscribe(
        &shop,
        &receiver.url,
        json!(["payment.completed", "payment.refunded"]),
    )
    .await;
    paid_then_refunded(&shop, 1).await;
    // The refund's looks: at once, then after 1-2 s, 2-3 s and 4-5 s more, so its third
    // is over by 10 s and its fourth not before 15 s.
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    assert!(
        receiver
            .received()
            .iter()
            .all(|r| r.json["event_type"] == "payment.completed"),
        "the refund waited for the completion"
    );
    receiver.answer_with(Arc::new(|_, _| Answer::Status(200)));
    let got = eventually(Duration::from_secs(20), "the refund", || async {
        let r = receiver.received();
        r.iter()
            .any(|r| r.json["event_type"] == "payment.refunded")
            .then_some(r)
    })
    .await;
    let at = |t: &str| {
        got.iter()
            .find(|r| r.json["event_type"] == t && r.answered == 200)
            .map(|r| r.at)
            .unwrap()
    };
    let behind = at("payment.refunded") - at("payment.completed");
    assert!(
        behind < chrono::Duration::seconds(3),
        "the refund went {behind} after the completion was accepted"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_thousand_events_across_ten_subscriptions_arrive_exactly_once_after_dedup() {
    // A database of its own: its thousand deliveries do not queue ahead of other tests'.
    let app = TestApp::spawn_isolated(true, |_| {}).await;
    let shop = Shop::open(&app).await;
    let mut receivers = Vec::new();
    for _ in 0..10 {
        let r = Receiver::ok().await;
        subscribe(&shop, &r.url, json!(["payment.completed"])).await;
        receivers.push(r);
    }
    let c = shop.customer().await;
    shop.fund(&c, 1_000_000).await;
    let mut ids = std::collections::HashSet::new();
    for _ in 0..100 {
        let p = shop.pay(&c, 1).await;
        assert_eq!(p.status, 200, "{}", p.body);
        ids.insert(p.body["data"]["payment_id"].as_str().unwrap().to_string());
    }
    eventually(Duration::from_secs(120), "1000 deliveries", || async {
        receivers
            .iter()
            .all(|r| r.accepted_event_ids().len() == 100)
            .then_some(())
    })
    .await;
    for r in &receivers {
        let payments: std::collections::HashSet<String> = r
            .received()
            .iter()
            .map(|x| x.json["data"]["payment_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(payments, ids, "every payment, to every subscription");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_resources_events_relayed_together_arrive_in_sequence_order_once_each() {
    // A slow relay gathers the payment and both refunds into one relay batch, so they go out
    // as one batch job: its chain for the payment must still send them one after another.
    let app = TestApp::spawn_isolated(true, |cfg| cfg.outbox_poll_ms = 1_500).await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    let (sub, _) = subscribe(
        &shop,
        &receiver.url,
        json!(["payment.completed", "payment.refunded"]),
    )
    .await;
    let pid = paid_then_refunded(&shop, 2).await;
    let got = eventually(Duration::from_secs(20), "all three events", || async {
        let r = receiver.received();
        (r.len() >= 3).then_some(r)
    })
    .await;
    let order: Vec<i64> = got
        .iter()
        .filter(|r| r.json["data"]["payment_id"] == pid.as_str())
        .map(|r| r.json["sequence_number"].as_i64().unwrap())
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(order, sorted, "in sequence order, each once: {order:?}");
    assert_eq!(order.len(), 3);
    let h = eventually(
        Duration::from_secs(10),
        "three DELIVERED records",
        || async {
            let h = history(&shop, &sub).await;
            (h.len() == 3 && h.iter().all(|d| d["state"] == "DELIVERED")).then_some(h)
        },
    )
    .await;
    for d in &h {
        let attempts = d["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "{d}");
        assert_eq!(attempts[0]["status_code"], 200);
        assert_eq!(attempts[0]["attempt"], 1, "{d}");
    }
    app.stop().await;
}

/// A queue worker that loses its database connection fails and is restarted; the delivery
/// it was sending ended with it. The restarted worker hands that job back at once, so the
/// event arrives seconds later, not after the minute a dead worker's jobs wait.
#[tokio::test]
async fn a_delivery_whose_worker_failed_mid_send_goes_out_again_at_once() {
    use tests::{
        Mode, mode,
        proxy::{Proxy, address_of},
    };
    if mode() != Mode::Production {
        eprintln!("production mode only: an embedded SQLite file has no connection to lose");
        return;
    }
    // The queue's own connection: the direct one when the service goes through a pooler.
    let cfg = tests::test_config();
    let queue_url = cfg
        .database_direct_url
        .or(cfg.database_url)
        .expect("a database URL");
    let proxy = Proxy::start(address_of(&queue_url).parse().unwrap()).await;
    let app = TestApp::spawn_isolated(true, |c| {
        let own = c.database_direct_url.as_mut().or(c.database_url.as_mut());
        let own = own.expect("a database URL");
        *own = proxy.route(own);
    })
    .await;
    let shop = Shop::open(&app).await;
    // The first request is held while the database goes away under the worker sending it.
    let receiver = Receiver::start(Arc::new(|n, _| match n {
        0 => Answer::Hang(Duration::from_millis(900)),
        _ => Answer::Status(200),
    }))
    .await;
    let (sub, _) = subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.pay(&c, 100).await;
    eventually(Duration::from_secs(20), "the first send", || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.heal();
    let started = std::time::Instant::now();
    eventually(Duration::from_secs(20), "the delivery", || async {
        let h = history(&shop, &sub).await;
        (h.first().is_some_and(|d| d["state"] == "DELIVERED")).then_some(())
    })
    .await;
    eprintln!(
        "delivered {:?} after the database came back",
        started.elapsed()
    );
    app.stop().await;
}
