//! Top-ups and grants, as the spec's "Top-up" and "Promotional grant" rules state them: a
//! SKU sale credits wallet_credits_minor × quantity once per POS order with its bonus in
//! the same transaction; clawback removes only the unspent remainder; expiry runs once.
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    TestApp, send,
    shop::{Customer, Shop, random_phone},
};
use uuid::Uuid;

async fn register_sku(shop: &Shop<'_>, sku: &str, credit: i64, bonus: Value) -> tests::Reply {
    send(
        shop.app
            .post("/skus")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&shop.body(
                json!({"sku_id": sku, "name": "Top-up card", "currency": "EUR",
                                    "wallet_credits_minor": credit, "bonus": bonus}),
            )),
    )
    .await
}

async fn topup(
    shop: &Shop<'_>,
    sku: &str,
    phone: &str,
    order: &str,
    quantity: Value,
) -> tests::Reply {
    shop.post(
        &format!("/topup/sku/{sku}"),
        json!({"pos_order_ref": order, "customer": {"credential_type": "phone", "phone": phone},
               "quantity": quantity, "amount_minor": 999_999}),
    )
    .await
}

#[tokio::test]
async fn a_sku_sale_credits_quantity_times_the_sku_with_a_released_bonus() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let r = register_sku(
        &shop,
        "CARD-10",
        1_000,
        json!({"amount_minor": 100, "expiry_days": 30}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["version"], 1);

    let first_sale = topup(&shop, "CARD-10", &c.phone, "POS-1", json!(3)).await;
    assert_eq!(first_sale.status, 200, "{}", first_sale.body);
    let d = &first_sale.body["data"];
    assert_eq!(
        d["credited_actual_minor"], 3_000,
        "money fields in the body are ignored"
    );
    assert_eq!(d["bonus_minor"], 300);
    assert_eq!(d["bonus_state"], "RELEASED");
    assert_eq!(d["customer_state"], "VERIFIED");
    assert_eq!(d["balance_after"]["actual_minor"], 3_000);
    assert_eq!(d["balance_after"]["promo_available_minor"], 300);
    assert_eq!(d["wallet_id"], c.wallet_id.as_str());

    // A changed SKU applies to later sales only.
    let r = register_sku(&shop, "CARD-10", 2_000, json!({"percent_bps": 500})).await;
    assert_eq!(r.body["data"]["version"], 2);
    let again = topup(&shop, "CARD-10", &c.phone, "POS-1", json!(3)).await;
    assert_eq!(again.status, 200);
    assert_eq!(&again.body["data"], d, "the order credits once");
    let r = topup(&shop, "CARD-10", &c.phone, "POS-2", json!(1)).await;
    assert_eq!(r.body["data"]["credited_actual_minor"], 2_000);
    assert_eq!(r.body["data"]["bonus_minor"], 100);
    assert_eq!(r.body["data"]["sku_version"], 2);
    let first = entities::topup::Entity::find()
        .filter(entities::topup::Column::OrderRef.eq("POS-1"))
        .filter(entities::topup::Column::MerchantId.eq(shop.merchant()))
        .one(&app.server.state.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            first.credited_actual_minor,
            first.bonus_minor,
            first.sku_version
        ),
        (3_000, 300, Some(1))
    );

    // The same order reported for another sale is refused.
    let r = topup(&shop, "CARD-10", &c.phone, "POS-2", json!(5)).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    let skus = send(
        app.get("/skus")
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(skus.body["data"][0]["wallet_credits_minor"], 2_000);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_sale_to_an_unknown_phone_opens_a_proto_wallet_with_a_locked_bonus() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    register_sku(&shop, "CARD-5", 500, json!({"amount_minor": 50})).await;
    let phone = random_phone();
    let r = topup(&shop, "CARD-5", &phone, "POS-9", json!(2)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["customer_state"], "PENDING_PROOF");
    assert_eq!(d["bonus_state"], "LOCKED");
    assert_eq!(d["balance_after"]["actual_minor"], 1_000);
    assert_eq!(d["balance_after"]["promo_locked_minor"], 100);
    let c = Customer {
        phone,
        wallet_id: d["wallet_id"].as_str().unwrap().into(),
        wallet_user_id: d["wallet_user_id"].as_str().unwrap().into(),
    };
    // The proto-wallet cannot pay until the customer enrolls.
    let r = shop.pay(&c, 100).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    let db = &app.server.state.db;
    let held = entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(shop.merchant()))
        .filter(entities::outbox::Column::Topic.eq("enrollment.pending_proof"))
        .count(db)
        .await
        .unwrap();
    assert_eq!(held, 1);
    let windows = entities::enrollment::Entity::find()
        .filter(entities::enrollment::Column::MerchantId.eq(shop.merchant()))
        .filter(entities::enrollment::Column::Status.eq("pending"))
        .count(db)
        .await
        .unwrap();
    assert_eq!(
        windows, 1,
        "the proto-wallet's pending-proof window is open"
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn twenty_concurrent_reports_of_one_order_credit_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    register_sku(&shop, "CARD-1", 100, json!({"amount_minor": 10})).await;
    let replies = futures::future::join_all(
        (0..20).map(|_| topup(&shop, "CARD-1", &c.phone, "POS-RACE", json!(1))),
    )
    .await;
    let ids: std::collections::HashSet<String> = replies
        .iter()
        .map(|r| {
            assert_eq!(r.status, 200, "{}", r.body);
            r.body["data"]["topup_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), 1, "every report gets the one top-up");
    let b = shop.balance(&c).await;
    assert_eq!(b["actual_minor"], 100);
    assert_eq!(b["promo_available_minor"], 10);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn bad_quantities_and_unknown_or_foreign_skus_change_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    register_sku(&shop, "CARD-2", 200, Value::Null).await;
    for q in [json!(0), json!(-1), json!(1.5), json!("2"), Value::Null] {
        let r = topup(&shop, "CARD-2", &c.phone, "POS-Q", q.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{q}: {}",
            r.body
        );
        assert!(
            r.field_issues().iter().any(|(f, _)| f == "/quantity"),
            "{q}"
        );
    }
    let other = Shop::open(&app).await;
    register_sku(&other, "THEIRS", 200, Value::Null).await;
    for sku in ["THEIRS", "NOPE"] {
        let r = topup(&shop, sku, &c.phone, "POS-X", json!(1)).await;
        assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    }
    for bonus in [
        json!({"amount_minor": 10, "percent_bps": 100}),
        json!({"amount_minor": 0}),
        json!({"percent_bps": 100, "expiry_days": 0}),
    ] {
        let r = register_sku(&shop, "BAD", 100, bonus.clone()).await;
        assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"), "{bonus}");
    }
    let written = entities::topup::Entity::find()
        .filter(entities::topup::Column::MerchantId.eq(shop.merchant()))
        .count(&app.server.state.db)
        .await
        .unwrap();
    assert_eq!(written, 0);
    assert_eq!(shop.balance(&c).await["actual_minor"], 0);
}

#[tokio::test]
async fn clawback_after_partial_spend_removes_only_the_remainder_and_never_cash() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let grant = shop.grant(&c, 500, "RELEASED", 3600).await;
    let paid = shop.pay(&c, 200).await;
    assert_eq!(paid.body["data"]["debited_promo_minor"], 200);
    let claw = |key: String| {
        send(
            app.post(&format!("/grants/{grant}/clawback"))
                .header("x-operator-key", &shop.operator_key)
                .header("Idempotency-Key", key)
                .json(&json!({"reason": "fraudulent sale"})),
        )
    };
    let r = claw(Uuid::new_v4().to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["clawed_back_minor"], 300);
    assert_eq!(r.body["data"]["grant"]["state"], "CLAWED_BACK");
    assert_eq!(r.body["data"]["balance_after"]["actual_minor"], 1_000);
    assert_eq!(r.body["data"]["balance_after"]["promo_available_minor"], 0);
    // Again: nothing more to remove.
    let r = claw(Uuid::new_v4().to_string()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"]["clawed_back_minor"], 0);
    // A partner key is not an operator credential.
    let r = send(
        app.post(&format!("/grants/{grant}/clawback"))
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&json!({"reason": "x"})),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    let b = shop.balance(&c).await;
    assert_eq!(b["actual_minor"], 1_000, "actual money untouched");

    // The customer's grants, filtered and paginated.
    shop.grant(&c, 100, "LOCKED", 3600).await;
    let list = |q: &str| {
        send(
            app.get(&format!("/customers/{}/grants{q}", c.wallet_user_id))
                .bearer_auth(&shop.token),
        )
    };
    let r = list("?state=CLAWED_BACK").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["data"][0]["grant_id"], grant.as_str());
    let r = list("?limit=1").await;
    assert_eq!(r.body["meta"]["has_more"], true);
    let next = r.body["meta"]["next_cursor"].as_str().unwrap().to_string();
    let r2 = list(&format!("?limit=1&cursor={next}")).await;
    assert_eq!(r2.body["meta"]["has_more"], false);
    assert_ne!(
        r.body["data"][0]["grant_id"],
        r2.body["data"][0]["grant_id"]
    );
    let r = list("?state=NOPE").await;
    assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"));
    let other = Shop::open(&app).await;
    let r = send(
        app.get(&format!("/customers/{}/grants", c.wallet_user_id))
            .bearer_auth(&other.token),
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn grant_expiry_run_twice_at_once_expires_each_grant_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100).await;
    let g1 = shop.grant(&c, 300, "RELEASED", 1).await;
    let g2 = shop.grant(&c, 200, "LOCKED", 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let db = &app.server.state.db;
    let now = chrono::Utc::now();
    let (a, b) = tokio::join!(
        api::domain::incentives::grants::expire_due(db, now, None),
        api::domain::incentives::grants::expire_due(db, now, None)
    );
    // Both runs succeed; another test's worker may have taken some of these grants first,
    // so the counts are not asserted: the events below are the proof.
    a.unwrap();
    b.unwrap();
    let events: Vec<Value> = entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(shop.merchant()))
        .filter(entities::outbox::Column::Topic.eq("promo_grant.expired"))
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.payload)
        .collect();
    let mut ids: Vec<&str> = events
        .iter()
        .map(|e| e["grant_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut expected = vec![g1.as_str(), g2.as_str()];
    expected.sort();
    assert_eq!(ids, expected, "each grant expired exactly once");
    let forfeited: i64 = events
        .iter()
        .map(|e| e["amount_minor"].as_i64().unwrap())
        .sum();
    assert_eq!(forfeited, 500);
    let b = shop.balance(&c).await;
    assert_eq!(b["actual_minor"], 100);
    assert_eq!(b["promo_available_minor"], 0);
    assert_eq!(b["promo_locked_minor"], 0);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_clawback_racing_payments_removes_exactly_what_they_did_not_spend() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let grant = shop.grant(&c, 500, "RELEASED", 3600).await;
    // One OTP session per order (a QR re-mint would supersede the previous nonce).
    let sessions = shop.otp_sessions(&c, 4, 150).await;
    let payments = sessions.iter().map(|(order, session, code)| {
        let body = json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code,
                          "otp_session_id": session}, "amount_minor": 150, "currency": "EUR", "order_ref": order});
        let shop = &shop;
        async move { shop.post("/payments", body).await }
    });
    let clawback = send(
        app.post(&format!("/grants/{grant}/clawback"))
            .header("x-operator-key", &shop.operator_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&json!({"reason": "race"})),
    );
    let (paid, clawed) = tokio::join!(futures::future::join_all(payments), clawback);
    assert_eq!(clawed.status, 200, "{}", clawed.body);
    let mut spent = 0;
    for r in &paid {
        match r.status {
            200 => {
                assert_eq!(r.body["data"]["debited_promo_minor"], 150, "{}", r.body);
                spent += 150;
            }
            _ => assert_eq!(r.code(), "INSUFFICIENT_FUNDS", "{}", r.body),
        }
    }
    let removed = clawed.body["data"]["clawed_back_minor"].as_i64().unwrap();
    assert_eq!(
        spent + removed,
        500,
        "every minor unit either spent or clawed back, once"
    );
    let b = shop.balance(&c).await;
    assert_eq!(b["promo_available_minor"], 0);
    assert_eq!(b["actual_minor"], 0);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

/// Issue 25, point 0: a SKU with a large per-unit bonus sold in a large quantity once made
/// a 10^18 grant; ten of them wrapped the promotional sum negative and a wallet holding a
/// million refused a payment of 5. Every derived amount stays within the largest amount a
/// request may carry, and a sale that would leave it is refused before anything is written.
#[tokio::test]
async fn a_bonus_past_the_largest_amount_is_refused_and_the_wallet_still_pays() {
    const MAX: i64 = 1_000_000_000_000;
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100_000_000).await;
    let r = register_sku(&shop, "BIG-BONUS", 1, json!({"amount_minor": MAX})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for order in 0..10 {
        let r = topup(
            &shop,
            "BIG-BONUS",
            &c.phone,
            &format!("BIG-{order}"),
            json!(1_000_000),
        )
        .await;
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{}",
            r.body
        );
        assert_eq!(
            r.field_issues(),
            vec![("/quantity".to_string(), "too_large".to_string())]
        );
    }
    let b = shop.balance(&c).await;
    assert_eq!(b["actual_minor"], 100_000_000);
    assert_eq!(b["promo_available_minor"], 0, "nothing was written: {b}");
    let sales = entities::topup::Entity::find()
        .filter(entities::topup::Column::MerchantId.eq(shop.merchant()))
        .count(&app.server.state.db)
        .await
        .unwrap();
    assert_eq!(sales, 0);
    let paid = shop.pay(&c, 5).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(
        paid.body["data"]["balance_after"]["actual_minor"],
        99_999_995
    );
    shop.assert_ledger_consistent().await;
}

/// Issue 25, point 3: a wallet never holds more than the largest amount, actual money and
/// grants together; a credit that would take it past that is refused whole.
#[tokio::test]
async fn a_credit_that_would_overfill_a_wallet_is_refused_whole() {
    const MAX: i64 = 1_000_000_000_000;
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100_000_000).await;
    register_sku(&shop, "TENTH", MAX / 10, json!({"percent_bps": 100})).await;
    // Ten tenths and their 1 % bonus: more than a wallet may hold.
    let r = topup(&shop, "TENTH", &c.phone, "FULL-1", json!(10)).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(
        r.field_issues(),
        vec![("/quantity".to_string(), "wallet_limit".to_string())]
    );
    // Nine fit, with the bonus.
    let r = topup(&shop, "TENTH", &c.phone, "FULL-2", json!(9)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let held = 100_000_000 + 9 * (MAX / 10) + 9 * (MAX / 10) / 100;
    assert_eq!(
        r.body["data"]["balance_after"]["actual_minor"]
            .as_i64()
            .unwrap()
            + r.body["data"]["balance_after"]["promo_available_minor"]
                .as_i64()
                .unwrap(),
        held
    );
    // The operator's credit and grant hit the same limit.
    let room = MAX - held;
    let r = shop.credit(&c, room + 1).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(r.field_issues()[0].1, "wallet_limit");
    let r = shop.credit(&c, room).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A refund into the full wallet would overfill it too.
    let paid = shop.pay(&c, 1_000).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let again = shop.credit(&c, 1_000).await;
    assert_eq!(again.status, 200, "{}", again.body);
    let pid = paid.body["data"]["payment_id"].as_str().unwrap();
    let r = shop
        .post(
            &format!("/payments/{pid}/refund"),
            json!({"amount_minor": 1, "currency": "EUR"}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(
        r.field_issues(),
        vec![("/amount_minor".to_string(), "wallet_limit".to_string())]
    );
    let b = shop.balance(&c).await;
    assert_eq!(
        b["actual_minor"].as_i64().unwrap() + b["promo_available_minor"].as_i64().unwrap(),
        MAX
    );
    shop.assert_ledger_consistent().await;
}
