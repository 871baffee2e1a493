//! `GET /events`: what the webhooks carry, pulled. The same envelope the receiver got, in
//! the caller's scope only, filtered by type, resource and time, newest first.
use std::time::Duration;

use serde_json::{Value, json};
use tests::{TestApp, eventually, send, shop::Shop, webhooks::Receiver};

use super::subscribe;

async fn events(shop: &Shop<'_>, key: &str, query: &str) -> tests::Reply {
    send(
        shop.app
            .get(&format!("/events{query}"))
            .header("x-api-key", key),
    )
    .await
}

fn ids(r: &tests::Reply) -> Vec<String> {
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_missed_delivery_can_be_pulled_byte_for_byte_as_the_webhook_carried_it() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 250).await;
    let payment_id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let got = eventually(Duration::from_secs(20), "the delivery", || async {
        receiver.received().first().cloned()
    })
    .await;
    let key = &shop.tenant.platform_key;

    // The event by id is the delivered envelope, field for field.
    let r = events(&shop, key, &format!("/{}", got.event_id())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"], got.json, "the same envelope as delivered");

    // The list: newest first, filtered by type and by resource.
    let r = events(&shop, key, "?event_type=payment.completed").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ids(&r), vec![got.event_id()]);
    let r = events(
        &shop,
        key,
        &format!("?resource_type=payment&resource_id={payment_id}"),
    )
    .await;
    assert!(ids(&r).contains(&got.event_id()), "{}", r.body);
    let all = events(&shop, key, "").await;
    let types: Vec<&str> = all.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"wallet.balance_changed"), "{types:?}");
    let listed: Vec<String> = ids(&all);
    let mut sorted = listed.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(listed, sorted, "newest first");

    // Pages: one at a time, every event once.
    let mut seen = vec![];
    let mut cursor = String::new();
    loop {
        let r = events(&shop, key, &format!("?limit=1{cursor}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        seen.extend(ids(&r));
        match r.body["meta"]["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, listed);

    // A time window after the payment holds nothing.
    let later = (chrono::Utc::now() + chrono::Duration::seconds(5)).to_rfc3339();
    let r = events(
        &shop,
        key,
        &format!("?occurred_after={}", later.replace('+', "%2B")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(ids(&r).is_empty(), "{}", r.body);
    app.stop().await;
}

#[tokio::test]
async fn another_tenants_events_are_never_seen_and_bad_filters_are_field_errors() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let key = &shop.tenant.platform_key;
    let mine = eventually(Duration::from_secs(20), "an emitted event", || async {
        let r = events(&shop, key, "").await;
        let ids = ids(&r);
        (!ids.is_empty()).then_some(ids)
    })
    .await;

    // The other tenant's feed does not hold them, by list, by id or by merchant filter.
    let okey = &other.tenant.platform_key;
    let r = events(&other, okey, "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(ids(&r).iter().all(|i| !mine.contains(i)), "{}", r.body);
    let r = events(&other, okey, &format!("/{}", mine[0])).await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    let r = events(&other, okey, &format!("?merchant_id={}", shop.merchant())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(ids(&r).is_empty(), "{}", r.body);
    let unknown = uuid::Uuid::now_v7();
    let r = events(&shop, key, &format!("/{unknown}")).await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));

    for (query, field) in [
        ("?event_type=payment.done", "query:event_type"),
        ("?resource_type=payment", "query:resource_id"),
        ("?occurred_after=yesterday", "query:occurred_after"),
        (
            "?occurred_after=2026-01-02T00:00:00Z&occurred_before=2026-01-01T00:00:00Z",
            "query:occurred_before",
        ),
        ("?limit=0", "query:limit"),
        ("?cursor=bm9wZQ", "query:cursor"),
        ("?merchant_id=42", "query:merchant_id"),
    ] {
        events(&shop, key, query).await.assert_field_error(field);
    }
    let r = events(&shop, key, "/not-a-uuid").await;
    r.assert_field_error("path:eventId");
    let _: Value = r.body;
    app.stop().await;
}
