//! Offers and campaign budgets (beta): an offer is armed for one customer, evaluated without
//! writing, redeemed once against that customer's payment or expired by the sweep; a
//! budget's compare-and-swap never lets concurrent accruals overspend it, and a partner's
//! stale version is CONFLICT.
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    TestApp, send,
    shop::{Customer, Shop},
};

fn in_secs(s: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(s)).to_rfc3339()
}

async fn arm(shop: &Shop<'_>, c: &Customer, reward: Value, extra: Value) -> tests::Reply {
    let mut body = json!({"wallet_user_id": c.wallet_user_id, "name": "Autumn deal",
                          "currency": "EUR", "reward": reward, "expires_at": in_secs(3_600)});
    if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(x.clone());
    }
    shop.control("/offers", body).await
}

async fn redeem(shop: &Shop<'_>, offer: &str, payment: &str) -> tests::Reply {
    shop.post(
        &format!("/offers/{offer}/redeem"),
        json!({"payment_id": payment}),
    )
    .await
}

fn id(r: &tests::Reply, field: &str) -> String {
    r.body["data"][field].as_str().unwrap().to_string()
}

async fn outbox_count(app: &TestApp, merchant: uuid::Uuid, topic: &str) -> u64 {
    entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(merchant))
        .filter(entities::outbox::Column::Topic.eq(topic))
        .count(&app.server.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_offer_is_evaluated_without_writes_and_redeemed_once_against_its_customers_payment() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let stranger = shop.customer().await;
    shop.fund(&c, 20_000).await;
    shop.fund(&stranger, 20_000).await;
    let early = shop.pay(&c, 5_000).await;
    let offer = arm(
        &shop,
        &c,
        json!({"percent_bps": 1_000, "max_reward_minor": 300}),
        json!({"min_amount_minor": 1_000}),
    )
    .await;
    assert_eq!(offer.status, 200, "{}", offer.body);
    assert_eq!(offer.body["data"]["state"], "ARMED");
    let offer_id = id(&offer, "offer_id");
    assert_eq!(outbox_count(&app, shop.merchant(), "offer.armed").await, 1);

    let events_before = entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(shop.merchant()))
        .count(&app.server.state.db)
        .await
        .unwrap();
    let evaluate = |amount: i64| {
        send(
            app.post("/offers/evaluate")
                .bearer_auth(&shop.token)
                .json(&shop.body(
                    json!({"customer": {"credential_type": "phone", "phone": c.phone},
                                        "amount_minor": amount, "currency": "EUR"}),
                )),
        )
    };
    let small = evaluate(500).await;
    assert_eq!(small.status, 200, "{}", small.body);
    assert_eq!(small.body["data"]["offers"][0]["eligible"], false);
    assert_eq!(small.body["data"]["offers"][0]["reason"], "below_minimum");
    let big = evaluate(5_000).await;
    assert_eq!(big.body["data"]["offers"][0]["eligible"], true);
    assert_eq!(big.body["data"]["offers"][0]["reward_minor"], 300);
    assert_eq!(
        entities::outbox::Entity::find()
            .filter(entities::outbox::Column::MerchantId.eq(shop.merchant()))
            .count(&app.server.state.db)
            .await
            .unwrap(),
        events_before,
        "evaluation writes nothing"
    );

    let r = redeem(&shop, &offer_id, &id(&early, "payment_id")).await;
    assert_eq!(
        r.field_issues(),
        vec![("/payment_id".into(), "payment_before_offer".into())]
    );
    let theirs = shop.pay(&stranger, 5_000).await;
    let r = redeem(&shop, &offer_id, &id(&theirs, "payment_id")).await;
    assert_eq!(
        r.field_issues(),
        vec![("/payment_id".into(), "other_customer".into())]
    );

    let second = arm(&shop, &c, json!({"amount_minor": 50}), json!({})).await;
    let paid = shop.pay(&c, 2_000).await;
    let r = redeem(&shop, &offer_id, &id(&paid, "payment_id")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["offer"]["state"], "REDEEMED");
    assert_eq!(
        r.body["data"]["grant"]["original_minor"], 200,
        "10 % of 2000"
    );
    assert_eq!(r.body["data"]["grant"]["source"], "OFFER");
    assert_eq!(
        r.body["data"]["balance_after"]["promo_available_minor"],
        200
    );
    assert_eq!(
        outbox_count(&app, shop.merchant(), "offer.redeemed").await,
        1
    );

    let again = redeem(&shop, &offer_id, &id(&paid, "payment_id")).await;
    assert_eq!(again.code(), "VALIDATION_ERROR");
    assert_eq!(again.body["error"]["details"]["offer_state"], "REDEEMED");

    // Offers never stack on one payment.
    let r = redeem(&shop, &id(&second, "offer_id"), &id(&paid, "payment_id")).await;
    assert_eq!(
        r.field_issues(),
        vec![("/payment_id".into(), "payment_already_rewarded".into())]
    );

    // The reward is the payment's: voiding the payment takes it back.
    let void = shop
        .post(
            &format!("/payments/{}/void", id(&paid, "payment_id")),
            json!({"reason": "test"}),
        )
        .await;
    assert_eq!(void.status, 200, "{}", void.body);
    assert_eq!(void.body["data"]["offer_reward_reversed_minor"], 200);
    assert_eq!(
        void.body["data"]["balance_after"]["promo_available_minor"],
        0
    );

    // Another tenant sees no such offer.
    let other = Shop::open(&app).await;
    let r = send(
        app.get(&format!("/offers/{offer_id}"))
            .header("x-api-key", &other.tenant.platform_key),
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn an_unredeemed_offer_expires_once_however_many_sweeps_run() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let offer = arm(
        &shop,
        &c,
        json!({"amount_minor": 100}),
        json!({"expires_at": in_secs(1)}),
    )
    .await;
    assert_eq!(offer.status, 200, "{}", offer.body);
    let offer_id = id(&offer, "offer_id");
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let r = send(
        app.get(&format!("/offers/{offer_id}"))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.body["data"]["state"], "EXPIRED", "shown at once on read");

    let db = &app.server.state.db;
    let now = chrono::Utc::now();
    let (a, b) = tokio::join!(
        api::domain::incentives::offers::expire_due(db, now, None),
        api::domain::incentives::offers::expire_due(db, now, None)
    );
    assert!(a.unwrap() + b.unwrap() >= 1);
    assert_eq!(
        outbox_count(&app, shop.merchant(), "offer.expired").await,
        1
    );
    api::domain::incentives::offers::expire_due(db, chrono::Utc::now(), None)
        .await
        .unwrap();
    assert_eq!(
        outbox_count(&app, shop.merchant(), "offer.expired").await,
        1
    );

    let paid = {
        shop.fund(&c, 1_000).await;
        shop.pay(&c, 1_000).await
    };
    let r = redeem(&shop, &offer_id, &id(&paid, "payment_id")).await;
    assert_eq!(r.body["error"]["details"]["offer_state"], "EXPIRED");
}

#[tokio::test]
async fn concurrent_redemptions_never_overspend_the_budget() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let budget = shop
        .control(
            "/incentives/budgets",
            json!({"name": "Launch", "currency": "EUR", "limit_minor": 500}),
        )
        .await;
    assert_eq!(budget.status, 200, "{}", budget.body);
    let budget_id = id(&budget, "budget_id");
    let mut pairs = Vec::new();
    for _ in 0..20 {
        // A customer each: the budget row is all the redemptions share.
        let c = shop.customer().await;
        shop.fund(&c, 1_000).await;
        let o = arm(
            &shop,
            &c,
            json!({"amount_minor": 100}),
            json!({"budget_id": budget_id}),
        )
        .await;
        assert_eq!(o.status, 200, "{}", o.body);
        let p = shop.pay(&c, 1_000).await;
        assert_eq!(p.status, 200, "{}", p.body);
        pairs.push((id(&o, "offer_id"), id(&p, "payment_id")));
    }
    let replies = futures::future::join_all(pairs.iter().map(|(o, p)| redeem(&shop, o, p))).await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 5, "500 / 100 per reward");
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!(
            r.field_issues(),
            vec![("/".to_string(), "budget_exhausted".to_string())],
            "{}",
            r.body
        );
    }
    let b = send(
        app.get(&format!("/incentives/budgets/{budget_id}"))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(b.body["data"]["spent_minor"], 500);
    let granted: i64 = entities::promo_grant::Entity::find()
        .filter(entities::promo_grant::Column::MerchantId.eq(shop.merchant()))
        .filter(entities::promo_grant::Column::Source.eq("OFFER"))
        .all(&app.server.state.db)
        .await
        .unwrap()
        .iter()
        .map(|g| g.original_minor)
        .sum();
    assert_eq!(
        granted, 500,
        "the grants issued equal what the budget spent"
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_stale_budget_version_is_conflict_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let budget = shop
        .control(
            "/incentives/budgets",
            json!({"name": "Launch", "currency": "EUR", "limit_minor": 500}),
        )
        .await;
    let budget_id = id(&budget, "budget_id");
    let version = budget.body["data"]["version"].as_i64().unwrap();
    let change = |limit: i64| {
        send(
            app.client
                .patch(format!("{}/incentives/budgets/{budget_id}", app.url))
                .header("x-api-key", &shop.tenant.platform_key)
                .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                .json(&shop.body(json!({"limit_minor": limit, "expected_version": version}))),
        )
    };
    let replies = futures::future::join_all((1..=10).map(|i| change(1_000 * i))).await;
    let ok: Vec<_> = replies.iter().filter(|r| r.status == 200).collect();
    assert_eq!(ok.len(), 1, "one writer wins the compare-and-swap");
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!((r.status, r.code()), (409, "CONFLICT"), "{}", r.body);
        assert_eq!(r.body["error"]["details"]["current_version"], version + 1);
    }
    let b = send(
        app.get(&format!("/incentives/budgets/{budget_id}"))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(
        b.body["data"]["limit_minor"],
        ok[0].body["data"]["limit_minor"]
    );
    assert_eq!(b.body["data"]["version"], version + 1);

    let r = change(0).await;
    assert_eq!(r.code(), "CONFLICT", "the old version stays stale");
}

#[tokio::test]
async fn one_offer_redeemed_by_five_payments_at_once_rewards_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let offer = arm(&shop, &c, json!({"amount_minor": 100}), json!({})).await;
    let offer_id = id(&offer, "offer_id");
    let mut payments = Vec::new();
    for _ in 0..5 {
        payments.push(id(&shop.pay(&c, 1_000).await, "payment_id"));
    }
    let replies =
        futures::future::join_all(payments.iter().map(|p| redeem(&shop, &offer_id, p))).await;
    assert_eq!(replies.iter().filter(|r| r.status == 200).count(), 1);
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!(
            r.body["error"]["details"]["offer_state"], "REDEEMED",
            "{}",
            r.body
        );
    }
    let granted = entities::promo_grant::Entity::find()
        .filter(entities::promo_grant::Column::MerchantId.eq(shop.merchant()))
        .filter(entities::promo_grant::Column::Source.eq("OFFER"))
        .count(&app.server.state.db)
        .await
        .unwrap();
    assert_eq!(granted, 1, "one reward");
    shop.assert_ledger_consistent().await;
}

async fn cancel(shop: &Shop<'_>, offer: &str) -> tests::Reply {
    shop.post(&format!("/offers/{offer}/cancel"), json!({}))
        .await
}

/// A partner withdraws an armed offer: it is CANCELLED, a second cancel changes nothing, no
/// payment redeems it any more; a redeemed offer is not cancelled (VALIDATION_ERROR naming
/// its state) and keeps its reward.
#[tokio::test]
async fn a_cancelled_offer_is_never_redeemed_and_a_redeemed_one_is_never_cancelled() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;

    let withdrawn = id(
        &arm(&shop, &c, json!({"amount_minor": 100}), json!({})).await,
        "offer_id",
    );
    let r = cancel(&shop, &withdrawn).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "CANCELLED");
    let again = cancel(&shop, &withdrawn).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["data"]["state"], "CANCELLED");
    let paid = shop.pay(&c, 2_000).await;
    let r = redeem(&shop, &withdrawn, &id(&paid, "payment_id")).await;
    assert_eq!(r.code(), "VALIDATION_ERROR", "{}", r.body);
    assert_eq!(r.body["error"]["details"]["offer_state"], "CANCELLED");
    assert_eq!(shop.balance(&c).await["promo_available_minor"], 0);

    let kept = id(
        &arm(&shop, &c, json!({"amount_minor": 100}), json!({})).await,
        "offer_id",
    );
    let paid = shop.pay(&c, 2_000).await;
    let r = redeem(&shop, &kept, &id(&paid, "payment_id")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = cancel(&shop, &kept).await;
    assert_eq!(r.code(), "VALIDATION_ERROR", "{}", r.body);
    assert_eq!(r.body["error"]["details"]["offer_state"], "REDEEMED");
    assert_eq!(shop.balance(&c).await["promo_available_minor"], 100);
    shop.assert_ledger_consistent().await;
}
