//! Cashback: accrued with the payment, taken back in proportion by refunds and voids,
//! never from cash, and never beyond its budget.
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{TestApp, shop::Shop};
use uuid::Uuid;

pub(super) async fn cashback_rule(shop: &Shop<'_>, extra: Value) -> tests::Reply {
    let mut body = json!({"wallet_program_id": shop.tenant.wallet_program_id.to_string(),
                          "currency": "EUR", "rate_bps": 1_000, "expiry_days": 30});
    if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(x.clone());
    }
    shop.control("/incentives/cashback/config", body).await
}

pub(super) async fn refund(shop: &Shop<'_>, payment: &str, amount: Option<i64>) -> tests::Reply {
    let mut body = json!({"reason": "test"});
    if let Some(a) = amount {
        body["amount_minor"] = json!(a);
    }
    shop.post(&format!("/payments/{payment}/refund"), body)
        .await
}

#[tokio::test]
async fn cashback_accrues_with_the_payment_and_refunds_and_voids_take_back_their_share() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let in_force = format!(
        "/incentives/cashback/config?wallet_program_id={}",
        shop.tenant.wallet_program_id
    );
    assert_eq!(shop.read(&in_force).await.code(), "NOT_FOUND");
    let r = cashback_rule(&shop, json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The rule in force reads back as it was set.
    let read = shop.read(&in_force).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["data"]["rule_id"], r.body["data"]["rule_id"]);
    assert_eq!(
        (
            &read.body["data"]["rate_bps"],
            &read.body["data"]["expiry_days"]
        ),
        (&json!(1_000), &json!(30))
    );

    let paid = shop.pay(&c, 4_000).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let cashback = &paid.body["data"]["cashback"];
    assert_eq!(cashback["source"], "CASHBACK");
    assert_eq!(cashback["state"], "RELEASED");
    assert_eq!(cashback["original_minor"], 400);
    assert_eq!(
        paid.body["data"]["balance_after"]["promo_available_minor"],
        400
    );
    let first = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();

    // A quarter of the payment back: a quarter of its cashback back.
    let r = refund(&shop, &first, Some(1_000)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["cashback_reversed_minor"], 100);
    assert_eq!(
        r.body["data"]["balance_after"]["promo_available_minor"],
        300
    );

    // Promotional credit pays first and earns no cashback: 300 promo + 1700 actual → 170.
    let second = shop.pay(&c, 2_000).await;
    assert_eq!(second.body["data"]["debited_promo_minor"], 300);
    assert_eq!(second.body["data"]["cashback"]["original_minor"], 170);
    let second_id = second.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let void = shop
        .post(
            &format!("/payments/{second_id}/void"),
            json!({"reason": "test"}),
        )
        .await;
    assert_eq!(void.status, 200, "{}", void.body);
    assert_eq!(void.body["data"]["cashback_reversed_minor"], 170);
    let grant = Uuid::parse_str(
        second.body["data"]["cashback"]["grant_id"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let g = entities::promo_grant::Entity::find_by_id(grant)
        .one(&app.server.state.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((g.state.as_str(), g.remaining_minor), ("CLAWED_BACK", 0));

    // The first payment's cashback came back to its grant with the void (300 promo): the
    // rest of the first payment refunded takes back the other three quarters of its 400.
    let r = refund(&shop, &first, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["cashback_reversed_minor"], 300);
    assert_eq!(r.body["data"]["rewards_unrecovered_minor"], 0);
    let b = shop.balance(&c).await;
    assert_eq!(b["actual_minor"], 10_000, "every payment came back");
    assert_eq!(b["promo_available_minor"], 0);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_payment_earns_cashback_under_the_latest_version_of_its_programs_rule() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let earned = |r: &tests::Reply| r.body["data"]["cashback"]["original_minor"].clone();

    let first = shop.customer().await;
    shop.fund(&first, 1_000).await;
    let r = shop.pay(&first, 1_000).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body["data"]["cashback"].is_null(),
        "no rule yet: {}",
        r.body
    );

    for (rate, expected) in [(1_000, json!(100)), (500, json!(50))] {
        let r = cashback_rule(&shop, json!({"rate_bps": rate})).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let c = shop.customer().await;
        shop.fund(&c, 1_000).await;
        let paid = shop.pay(&c, 1_000).await;
        assert_eq!(paid.status, 200, "{}", paid.body);
        assert_eq!(earned(&paid), expected, "rate {rate} bps is in force");
    }

    // A paused version pauses the rule, whatever the earlier versions said.
    let r = cashback_rule(&shop, json!({"rate_bps": 2_000, "active": false})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 1_000).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert!(paid.body["data"]["cashback"].is_null(), "{}", paid.body);
    assert_eq!(paid.body["data"]["balance_after"]["actual_minor"], 0);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn spent_cashback_is_reported_unrecovered_and_never_taken_from_cash() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    cashback_rule(&shop, json!({"rate_bps": 1_000})).await;
    let a = shop.pay(&c, 1_000).await;
    assert_eq!(a.body["data"]["cashback"]["original_minor"], 100);
    // The whole cashback is spent on the next payment.
    let b = shop.pay(&c, 100).await;
    assert_eq!(b.status, 200, "{}", b.body);
    assert_eq!(b.body["data"]["debited_promo_minor"], 100);
    let a_id = a.body["data"]["payment_id"].as_str().unwrap();
    let r = refund(&shop, a_id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["cashback_reversed_minor"], 0);
    assert_eq!(r.body["data"]["rewards_unrecovered_minor"], 100);
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        1_000,
        "the refund returned all 1000 actual; nothing was taken from cash"
    );
    // The fully refunded payment's cashback grant is clawed back: the spent credit that a
    // void of the other payment returns is forfeited, not handed back to the customer.
    let b_id = b.body["data"]["payment_id"].as_str().unwrap();
    let v = shop
        .post(&format!("/payments/{b_id}/void"), json!({"reason": "test"}))
        .await;
    assert_eq!(v.status, 200, "{}", v.body);
    let after = shop.balance(&c).await;
    assert_eq!(after["actual_minor"], 1_000);
    assert_eq!(after["promo_available_minor"], 0);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn unrecovered_cashback_is_taken_when_the_spent_credit_comes_back() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    cashback_rule(&shop, json!({"rate_bps": 1_000})).await;
    let a = shop.pay(&c, 1_000).await;
    let b = shop.pay(&c, 100).await;
    assert_eq!(b.body["data"]["debited_promo_minor"], 100);
    let a_id = a.body["data"]["payment_id"].as_str().unwrap();
    let r = refund(&shop, a_id, Some(500)).await;
    assert_eq!(
        r.body["data"]["rewards_unrecovered_minor"], 50,
        "{}",
        r.body
    );
    // Voiding the payment that spent the cashback puts 100 back into its grant: the 50 still
    // owed by the half refund is taken from it then.
    let b_id = b.body["data"]["payment_id"].as_str().unwrap();
    let v = shop
        .post(&format!("/payments/{b_id}/void"), json!({"reason": "test"}))
        .await;
    assert_eq!(v.status, 200, "{}", v.body);
    assert_eq!(v.body["data"]["balance_after"]["promo_available_minor"], 50);
    let reward = entities::payment_reward::Entity::find()
        .filter(entities::payment_reward::Column::MerchantId.eq(shop.merchant()))
        .one(&app.server.state.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((reward.reversed_minor, reward.unrecovered_minor), (50, 0));
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_cashback_rule_with_a_budget_never_issues_more_than_the_budget() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let budget = shop
        .control(
            "/incentives/budgets",
            json!({"name": "Cashback Q4", "currency": "EUR", "limit_minor": 250}),
        )
        .await;
    assert_eq!(budget.status, 200, "{}", budget.body);
    let id = budget.body["data"]["budget_id"].as_str().unwrap();
    cashback_rule(&shop, json!({"budget_id": id})).await;
    let mut earned = Vec::new();
    for _ in 0..4 {
        // A customer each, so no payment spends an earlier cashback (which earns none).
        let c = shop.customer().await;
        shop.fund(&c, 1_000).await;
        let p = shop.pay(&c, 1_000).await;
        earned.push(
            p.body["data"]["cashback"]["original_minor"]
                .as_i64()
                .unwrap_or(0),
        );
    }
    assert_eq!(
        earned,
        vec![100, 100, 50, 0],
        "the last accruals shrink to what is left"
    );
    let r = tests::send(
        app.get(&format!("/incentives/budgets/{id}"))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.body["data"]["spent_minor"], 250);
    assert_eq!(r.body["data"]["remaining_minor"], 0);
    shop.assert_ledger_consistent().await;
}
