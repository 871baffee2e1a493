//! The reconciliation feed, as the spec's "Transactions" rows state it: scoped to the
//! integration in the path and the key; another integration's transaction is 403, an
//! unknown one 404; cursor pagination in a stable order that keeps its filters; the date
//! window is on activity time, each movement (sale, refund, void, top-up) once.
use serde_json::json;
use tests::{TestApp, shop::Shop};
use uuid::Uuid;

/// (movement, transaction id) of each line.
fn movements(r: &tests::Reply) -> Vec<(String, String)> {
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["movement"].as_str().unwrap().to_string(),
                t["transaction_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn line(movement: &str, id: &str) -> (String, String) {
    (movement.to_string(), id.to_string())
}

fn ids(r: &tests::Reply) -> Vec<String> {
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["transaction_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_feed_filters_by_status_pages_with_its_filters_and_details_each_transaction() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let mut paid = Vec::new();
    for amount in [100, 200, 300, 400] {
        let p = shop.pay(&c, amount).await;
        paid.push(p.body["data"]["payment_id"].as_str().unwrap().to_string());
    }
    let r = shop
        .post(
            &format!("/payments/{}/refund", paid[1]),
            json!({"amount_minor": 50, "reason": "test"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post(
            &format!("/payments/{}/void", paid[2]),
            json!({"reason": "test"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let base = format!("/{}/transactions", shop.tenant.integration_id);

    let all = shop.read(&base).await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert_eq!(
        movements(&all),
        vec![
            line("void", &paid[2]),
            line("refund", &paid[1]),
            line("sale", &paid[3]),
            line("sale", &paid[2]),
            line("sale", &paid[1]),
            line("sale", &paid[0]),
        ]
    );
    assert_eq!(all.body["data"][1]["movement_amount_minor"], 50);
    assert_eq!(all.body["data"][1]["amount_minor"], 200);
    assert_eq!(all.body["data"][1]["reason"], "test");
    assert_ne!(all.body["data"][1]["movement_id"], paid[1].as_str());

    let partial = shop
        .read(&format!("{base}?status=partially_refunded"))
        .await;
    assert_eq!(
        movements(&partial),
        vec![line("refund", &paid[1]), line("sale", &paid[1])]
    );
    let voided = shop.read(&format!("{base}?status=voided")).await;
    assert_eq!(
        movements(&voided),
        vec![line("void", &paid[2]), line("sale", &paid[2])]
    );

    // Page by one through the completed ones: the cursor keeps the filter.
    let first = shop.read(&format!("{base}?status=completed&limit=1")).await;
    assert_eq!(ids(&first), vec![paid[3].clone()]);
    assert_eq!(first.body["meta"]["has_more"], true);
    let cursor = first.body["meta"]["next_cursor"].as_str().unwrap();
    let second = shop.read(&format!("{base}?limit=1&cursor={cursor}")).await;
    assert_eq!(ids(&second), vec![paid[0].clone()], "still completed only");
    assert_eq!(second.body["meta"]["has_more"], false);
    let clash = shop
        .read(&format!("{base}?status=voided&cursor={cursor}"))
        .await;
    assert_eq!(clash.code(), "VALIDATION_ERROR");

    // A date window that ends before the payments holds none of them.
    let past = shop.read(&format!("{base}?to=2020-01-01T00:00:00Z")).await;
    assert_eq!(ids(&past).len(), 0);

    let d = shop.read(&format!("{base}/{}", paid[1])).await;
    assert_eq!(d.status, 200, "{}", d.body);
    let data = &d.body["data"];
    assert_eq!(data["status"], "partially_refunded");
    assert_eq!(data["payment"]["amount_minor"], 200);
    assert_eq!(data["payment"]["refunded_minor"], 50);
    assert_eq!(data["payment"]["terminal_id"], "till-1");
    assert_eq!(data["payment"]["refunds"].as_array().unwrap().len(), 1);
    let events: Vec<&str> = data["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(events, vec!["payment.completed", "payment.refunded"]);
}

/// "Filterable by a date window": the window is on when the money moved, so a refund
/// today of yesterday's sale is in today's window (once), the sale in yesterday's, and a
/// page's cursor keeps the window.
#[tokio::test]
async fn the_date_window_holds_each_movement_when_it_happened_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(30));
    let stamp = || chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let day_one = stamp();
    pause().await;
    let sale = shop.pay(&c, 500).await.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let other = shop.pay(&c, 300).await.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    pause().await;
    let day_two = stamp();
    pause().await;
    for amount in [100, 150] {
        let r = shop
            .post(
                &format!("/payments/{sale}/refund"),
                json!({"amount_minor": amount, "reason": "late return"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = shop
        .post(&format!("/payments/{other}/void"), json!({"reason": "x"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    pause().await;
    let day_three = stamp();
    let base = format!("/{}/transactions", shop.tenant.integration_id);
    let window = |from: &str, to: &str| {
        format!(
            "{base}?from={}&to={}",
            from.replace('+', "%2B"),
            to.replace('+', "%2B")
        )
    };

    let yesterday = shop.read(&window(&day_one, &day_two)).await;
    assert_eq!(yesterday.status, 200, "{}", yesterday.body);
    assert_eq!(
        movements(&yesterday),
        vec![line("sale", &other), line("sale", &sale)]
    );
    let today = shop.read(&window(&day_two, &day_three)).await;
    assert_eq!(
        movements(&today),
        vec![
            line("void", &other),
            line("refund", &sale),
            line("refund", &sale)
        ]
    );
    let amounts: Vec<i64> = today.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["movement_amount_minor"].as_i64().unwrap())
        .collect();
    assert_eq!(amounts, vec![300, 150, 100]);

    // Page by one through today's refunds of partially refunded sales: the cursor keeps
    // the window and the status.
    let mut seen = Vec::new();
    let mut next = format!(
        "{}&status=partially_refunded&limit=1",
        window(&day_two, &day_three)
    );
    loop {
        let page = shop.read(&next).await;
        assert_eq!(page.status, 200, "{}", page.body);
        seen.extend(movements(&page));
        match page.body["meta"]["next_cursor"].as_str() {
            Some(cursor) => next = format!("{base}?limit=1&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, vec![line("refund", &sale), line("refund", &sale)]);
}

#[tokio::test]
async fn another_integrations_transactions_are_forbidden_and_unknown_ones_not_found() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let c = other.customer().await;
    other.fund(&c, 1_000).await;
    let theirs = other.pay(&c, 100).await;
    let theirs = theirs.body["data"]["payment_id"].as_str().unwrap();

    let r = shop
        .read(&format!("/{}/transactions", other.tenant.integration_id))
        .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"));
    let r = shop
        .read(&format!(
            "/{}/transactions/{theirs}",
            shop.tenant.integration_id
        ))
        .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    let body = r.body.to_string();
    // The amount as a JSON number: the text "100" can turn up inside a random request id.
    assert!(
        !body.contains(theirs) && !has_number(&r.body, 100),
        "{body}"
    );
    let r = shop
        .read(&format!(
            "/{}/transactions/{}",
            shop.tenant.integration_id,
            Uuid::now_v7()
        ))
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
    let r = shop
        .read(&format!(
            "/{}/transactions?status=settled",
            shop.tenant.integration_id
        ))
        .await;
    assert_eq!(r.code(), "VALIDATION_ERROR");
}

#[tokio::test]
async fn top_ups_are_in_the_feed_beside_payments_with_their_settlement_events() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 100).await;
    let payment = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = shop
        .control(
            "/topup/settlements",
            json!({"reference": "ST-FEED", "amount_minor": 2_500, "currency": "EUR", "state": "SETTLED"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let confirmed = shop
        .post(
            "/topup/confirm",
            json!({"settlement_reference": "ST-FEED",
                   "customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    let topup = confirmed.body["data"]["topup_id"]
        .as_str()
        .unwrap()
        .to_string();
    let base = format!("/{}/transactions", shop.tenant.integration_id);

    let all = shop.read(&base).await;
    assert_eq!(ids(&all), vec![topup.clone(), payment.clone()]);
    assert_eq!(all.body["data"][0]["movement"], "topup");
    assert_eq!(all.body["data"][0]["type"], "topup");
    assert_eq!(all.body["data"][0]["amount_minor"], 2_500);
    assert_eq!(all.body["data"][0]["topup_kind"], "settlement");
    assert_eq!(
        ids(&shop.read(&format!("{base}?type=payment")).await),
        vec![payment.clone()]
    );
    assert_eq!(
        ids(&shop.read(&format!("{base}?type=topup")).await),
        vec![topup.clone()]
    );
    assert_eq!(
        ids(&shop.read(&format!("{base}?status=voided")).await).len(),
        0,
        "a top-up is never voided"
    );

    let d = shop.read(&format!("{base}/{topup}")).await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(d.body["data"]["topup"]["order_ref"], "ST-FEED");
    assert_eq!(d.body["data"]["topup"]["credited_actual_minor"], 2_500);
    assert!(d.body["data"]["payment"].is_null());
    let events: Vec<&str> = d.body["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        vec!["topup.requested", "topup.confirmed", "transaction.settled"]
    );
}

fn has_number(v: &serde_json::Value, n: i64) -> bool {
    match v {
        serde_json::Value::Number(x) => x.as_i64() == Some(n),
        serde_json::Value::Array(a) => a.iter().any(|x| has_number(x, n)),
        serde_json::Value::Object(m) => m.values().any(|x| has_number(x, n)),
        _ => false,
    }
}
