//! "Page size: default 50, maximum 200" on every cursor-paginated list.
use serde_json::{Value, json};
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

/// Walks a list page by page (`limit`), returning every item's `id_field`; checks each
/// page's `meta.has_more` and that `meta.next_cursor` is null on the last page only.
async fn walk(app: &TestApp, key: &str, path: &str, limit: u64, id_field: &str) -> Vec<String> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}{sep}limit={limit}&cursor={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let r = send(app.get(&url).header("x-api-key", key)).await;
        r.assert_envelope();
        assert_eq!(r.status, 200, "{url}: {}", r.body);
        let items = r.body["data"].as_array().unwrap();
        assert!(items.len() as u64 <= limit, "{url}: {}", r.body);
        ids.extend(
            items
                .iter()
                .map(|i| i[id_field].as_str().unwrap().to_string()),
        );
        let more = r.body["meta"]["has_more"].as_bool().expect("meta.has_more");
        match r.body["meta"]["next_cursor"].as_str() {
            Some(c) => {
                assert!(more, "{url}: a cursor with has_more false: {}", r.body);
                cursor = Some(c.to_string());
            }
            None => {
                assert!(!more, "{url}: has_more without a cursor: {}", r.body);
                assert_eq!(r.body["meta"]["next_cursor"], Value::Null, "{url}");
                return ids;
            }
        }
    }
}

/// "Page size: default 50, maximum 200 (cursor-paginated lists: limit, cursor)", and
/// "meta.next_cursor: null on the final page": on the SKU, budget and webhook endpoint
/// lists as on every other, with one rule for a limit out of range and one cursor format
/// that another list's cursor does not fit.
#[tokio::test]
async fn every_list_pages_by_limit_and_cursor_with_the_same_bounds() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let key = shop.tenant.platform_key.clone();
    let mut skus = Vec::new();
    for i in 0..51 {
        let sku = format!("card-{i:02}-{}", Uuid::new_v4().simple());
        let r = shop
            .control(
                "/skus",
                json!({"sku_id": sku, "name": "Card", "currency": "EUR", "wallet_credits_minor": 100}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        skus.push(sku);
    }
    let mut budgets = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..3 {
        let r = shop
            .control(
                "/incentives/budgets",
                json!({"name": format!("Campaign {i}"), "currency": "EUR", "limit_minor": 1_000}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        budgets.push(r.body["data"]["budget_id"].as_str().unwrap().to_string());
        let r = shop
            .control(
                "/webhooks/subscriptions",
                json!({"url": format!("http://127.0.0.1:9/hook/{i}"), "event_types": ["payment.completed"]}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        endpoints.push(
            r.body["data"]["subscription"]["subscription_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }

    // Default 50.
    let r = send(app.get("/skus").header("x-api-key", &key)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 50);
    assert_eq!(r.body["meta"]["has_more"], true);
    // Every item once, in the order they were made, however the pages fall.
    assert_eq!(walk(&app, &key, "/skus", 200, "sku_id").await, skus);
    assert_eq!(walk(&app, &key, "/skus", 20, "sku_id").await, skus);
    assert_eq!(
        walk(&app, &key, "/incentives/budgets", 2, "budget_id").await,
        budgets
    );
    assert_eq!(
        walk(&app, &key, "/webhooks/subscriptions", 2, "subscription_id").await,
        endpoints
    );

    // Another list's cursor (the key list's: the tenant's platform key and one more).
    let r = send(
        app.post("/auth/keys")
            .header("x-api-key", &key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(
                &shop
                    .body(json!({"enterprise_id": shop.merchant().to_string(), "label": "second"})),
            ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = send(app.get("/auth/keys?limit=1").header("x-api-key", &key)).await;
    let other_lists_cursor = r.body["meta"]["next_cursor"].as_str().unwrap().to_string();
    for path in [
        "/skus",
        "/incentives/budgets",
        "/webhooks/subscriptions",
        "/auth/keys",
        "/offers",
    ] {
        for (query, field) in [
            ("limit=0", "query:limit"),
            ("limit=201", "query:limit"),
            ("cursor=not-a-cursor", "query:cursor"),
        ] {
            let r = send(
                app.get(&format!("{path}?{query}"))
                    .header("x-api-key", &key),
            )
            .await;
            r.assert_envelope();
            assert_eq!(
                (r.status, r.code()),
                (400, "VALIDATION_ERROR"),
                "{path}?{query}: {}",
                r.body
            );
            assert!(
                r.field_issues().iter().any(|(f, _)| f == field),
                "{path}?{query} names {field}: {}",
                r.body
            );
        }
        if path != "/auth/keys" {
            let r = send(
                app.get(&format!("{path}?cursor={other_lists_cursor}"))
                    .header("x-api-key", &key),
            )
            .await;
            assert_eq!(
                (r.status, r.code()),
                (400, "VALIDATION_ERROR"),
                "{path} refuses another list's cursor: {}",
                r.body
            );
        }
    }
}
