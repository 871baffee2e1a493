//! Disputes of a wallet payment: opening moves nothing; the customer winning refunds it
//! through the refund path, once, however many resolutions race.
use super::*;

#[tokio::test]
async fn a_dispute_opens_without_moving_money_and_a_customer_win_refunds_the_payment() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let payment = paid(&shop, &c, 400).await;

    let opened = open(&shop, &payment, json!({"reason": "customer says: not me"})).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let d = &opened.body["data"];
    assert_eq!(d["status"], "open");
    assert_eq!(d["type"], "payment");
    assert_eq!(d["amount_minor"], 400, "default: all that is disputable");
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        600,
        "opening moves no money"
    );
    let dispute = d["dispute_id"].as_str().unwrap().to_string();

    let second = open(&shop, &payment, json!({"reason": "again"})).await;
    assert_eq!(second.code(), "CONFLICT", "{}", second.body);
    assert_eq!(
        second.body["error"]["details"]["dispute_id"],
        dispute.as_str()
    );

    let won = resolve(&shop, &payment, &dispute, "customer_won").await;
    assert_eq!(won.status, 200, "{}", won.body);
    let w = &won.body["data"];
    assert_eq!(w["dispute"]["status"], "customer_won");
    assert_eq!(w["dispute"]["recovered_minor"], 400);
    assert_eq!(w["refund"]["amount_minor"], 400);
    assert_eq!(w["dispute"]["movement_id"], w["refund"]["refund_id"]);
    assert_eq!(w["balance_after"]["actual_minor"], 1_000);
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);

    let t = detail(&shop, &payment).await;
    assert_eq!(t["status"], "refunded");
    assert_eq!(t["disputes"][0]["status"], "customer_won");
    assert_eq!(
        event_types(&t),
        vec![
            "payment.completed",
            "transaction.disputed",
            "payment.refunded",
            "transaction.disputed"
        ]
    );
    let lines = feed(&shop).await;
    assert_eq!(lines[0]["movement"], "refund");
    assert_eq!(lines[0]["movement_id"], w["refund"]["refund_id"]);
    assert_eq!(lines[0]["movement_amount_minor"], 400);

    // The same outcome again answers the dispute as it is; the other one is a conflict.
    let again = resolve(&shop, &payment, &dispute, "customer_won").await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["data"]["dispute"], w["dispute"]);
    assert_eq!(
        again.body["data"]["refund"], w["refund"],
        "the refund it made then, not a second one"
    );
    let other = resolve(&shop, &payment, &dispute, "merchant_won").await;
    assert_eq!(other.code(), "CONFLICT", "{}", other.body);
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        1_000,
        "refunded once"
    );

    // A payment refunded in full has nothing left to dispute.
    let none = open(&shop, &payment, json!({"reason": "late"})).await;
    assert_eq!(
        field(&none),
        ("path:transactionId".into(), "nothing_to_dispute".into())
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_dispute_the_merchant_wins_moves_nothing_and_amounts_stay_within_the_payment() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let payment = paid(&shop, &c, 400).await;

    let too_much = open(&shop, &payment, json!({"amount_minor": 401, "reason": "x"})).await;
    assert_eq!(
        field(&too_much),
        ("/amount_minor".into(), "exceeds_disputable".into())
    );
    let other_currency = open(&shop, &payment, json!({"currency": "USD", "reason": "x"})).await;
    assert_eq!(
        field(&other_currency),
        ("/currency".into(), "currency_mismatch".into())
    );
    let no_reason = open(&shop, &payment, json!({})).await;
    assert_eq!(field(&no_reason).0, "/reason");
    let zero = open(&shop, &payment, json!({"amount_minor": 0, "reason": "x"})).await;
    assert_eq!(field(&zero).0, "/amount_minor");

    let d = open(
        &shop,
        &payment,
        json!({"amount_minor": 150, "reason": "partly"}),
    )
    .await;
    assert_eq!(d.status, 200, "{}", d.body);
    let dispute = d.body["data"]["dispute_id"].as_str().unwrap().to_string();
    let bad = resolve(&shop, &payment, &dispute, "draw").await;
    assert_eq!(field(&bad).0, "/outcome");
    let lost = resolve(&shop, &payment, &dispute, "merchant_won").await;
    assert_eq!(lost.status, 200, "{}", lost.body);
    assert_eq!(lost.body["data"]["dispute"]["status"], "merchant_won");
    assert_eq!(lost.body["data"]["dispute"]["recovered_minor"], 0);
    assert!(lost.body["data"]["refund"].is_null());
    assert_eq!(shop.balance(&c).await["actual_minor"], 600, "nothing moved");
    assert_eq!(detail(&shop, &payment).await["status"], "completed");

    // Resolved, it no longer blocks a new dispute.
    let next = open(&shop, &payment, json!({"reason": "new evidence"})).await;
    assert_eq!(next.status, 200, "{}", next.body);
    let unknown = resolve(&shop, &payment, &Uuid::now_v7().to_string(), "merchant_won").await;
    assert_eq!(unknown.code(), "NOT_FOUND");
    shop.assert_ledger_consistent().await;
}

/// Resolutions and openings racing each other: one refund, one open dispute, whatever
/// arrives together (each request with its own Idempotency-Key).
#[tokio::test]
async fn racing_resolutions_refund_once_and_racing_openings_open_one_dispute() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let payment = paid(&shop, &c, 400).await;

    let opens = futures::future::join_all(
        (0..6).map(|i| open(&shop, &payment, json!({"reason": format!("claim {i}")}))),
    )
    .await;
    let opened: Vec<&Reply> = opens.iter().filter(|r| r.status == 200).collect();
    assert_eq!(
        opened.len(),
        1,
        "{:?}",
        opens.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    assert!(
        opens
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.code() == "CONFLICT"),
        "the others are conflicts"
    );
    let dispute = opened[0].body["data"]["dispute_id"]
        .as_str()
        .unwrap()
        .to_string();

    let wins = futures::future::join_all(
        (0..6).map(|_| resolve(&shop, &payment, &dispute, "customer_won")),
    )
    .await;
    for r in &wins {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["dispute"]["status"], "customer_won");
    }
    let refunds: std::collections::BTreeSet<&str> = wins
        .iter()
        .map(|r| r.body["data"]["refund"]["refund_id"].as_str().unwrap())
        .collect();
    assert_eq!(refunds.len(), 1, "one refund, which every answer names");
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        1_000,
        "refunded once"
    );
    let t = detail(&shop, &payment).await;
    assert_eq!(t["payment"]["refunds"].as_array().unwrap().len(), 1);
    shop.assert_ledger_consistent().await;
}
