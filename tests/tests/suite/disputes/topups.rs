//! Disputes of a top-up: disputed whole; the customer winning takes its credit back from
//! the wallet (a chargeback) and ends its bonus.
use super::*;

#[tokio::test]
async fn a_top_up_chargeback_takes_back_only_what_the_wallet_still_holds() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let topup = topped_up(&shop, &c.phone).await;
    // 300 spent: the bonus's 100 first, then 200 of the credit.
    let spent = paid(&shop, &c, 300).await;

    let part = open(
        &shop,
        &topup,
        json!({"amount_minor": 500, "reason": "card chargeback"}),
    )
    .await;
    assert_eq!(
        field(&part),
        ("/amount_minor".into(), "whole_topup_only".into())
    );
    let d = open(&shop, &topup, json!({"reason": "card chargeback"})).await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(d.body["data"]["type"], "topup");
    assert_eq!(d.body["data"]["amount_minor"], 1_000);
    let dispute = d.body["data"]["dispute_id"].as_str().unwrap().to_string();
    let won = resolve(&shop, &topup, &dispute, "customer_won").await;
    assert_eq!(won.status, 200, "{}", won.body);
    let w = &won.body["data"];
    assert_eq!(w["topup_reversal"]["kind"], "chargeback");
    assert_eq!(w["topup_reversal"]["taken_back_minor"], 800);
    assert_eq!(w["topup_reversal"]["unrecovered_minor"], 200);
    assert_eq!(w["dispute"]["recovered_minor"], 800);
    assert_eq!(w["dispute"]["unrecovered_minor"], 200);
    let b = shop.balance(&c).await;
    assert_eq!(
        (
            b["actual_minor"].as_i64(),
            b["promo_available_minor"].as_i64()
        ),
        (Some(0), Some(0))
    );

    let t = detail(&shop, &topup).await;
    assert_eq!(t["status"], "reversed");
    assert_eq!(
        t["topup_reversal"]["reversal_id"],
        w["topup_reversal"]["reversal_id"]
    );
    let types = event_types(&t);
    assert_eq!(
        types
            .iter()
            .filter(|t| *t == "transaction.disputed")
            .count(),
        2,
        "{types:?}"
    );
    let lines = feed(&shop).await;
    let back = lines
        .iter()
        .find(|l| l["movement"] == "chargeback")
        .expect("the chargeback is a movement");
    assert_eq!(back["transaction_id"], topup.as_str());
    assert_eq!(back["movement_amount_minor"], 800);
    assert_eq!(back["status"], "reversed");
    let reversed = send(
        shop.app
            .get(&format!(
                "/{}/transactions?status=reversed",
                shop.tenant.integration_id
            ))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    let only: Vec<(&str, &str)> = reversed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["movement"].as_str().unwrap(),
                l["transaction_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        only,
        vec![("chargeback", topup.as_str()), ("topup", topup.as_str())],
        "status=reversed lists the top-up's movements and no payment"
    );

    // The bonus the customer spent ended with the top-up: refunding the payment it paid
    // returns the actual part only, never the bonus of a top-up they were repaid for.
    let r = shop
        .post(
            &format!("/payments/{spent}/refund"),
            json!({"reason": "returned goods"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let b = shop.balance(&c).await;
    assert_eq!(
        (
            b["actual_minor"].as_i64(),
            b["promo_available_minor"].as_i64()
        ),
        (Some(200), Some(0))
    );
    shop.assert_ledger_consistent().await;
}

/// A settlement top-up's bonus drew on a budget: a chargeback gives it back. Such a top-up
/// is not detached (its provider reference credits once): it is disputed.
#[tokio::test]
async fn a_settlement_top_up_charged_back_returns_its_bonus_to_the_budget_and_is_never_detached() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let budget = shop
        .control(
            "/incentives/budgets",
            json!({"name": "Reload Q4", "currency": "EUR", "limit_minor": 1_000}),
        )
        .await;
    assert_eq!(budget.status, 200, "{}", budget.body);
    let budget_id = budget.body["data"]["budget_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = shop
        .control(
            "/topup/reload-bonus/config",
            json!({"wallet_program_id": shop.tenant.wallet_program_id.to_string(),
                   "currency": "EUR", "budget_id": budget_id,
                   "tiers": [{"min_amount_minor": 1_000, "bonus_minor": 150}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let reference = format!("ref-{}", Uuid::new_v4());
    let r = shop
        .control(
            "/topup/settlements",
            json!({"reference": reference, "amount_minor": 2_000, "currency": "EUR",
                   "state": "SETTLED", "provider": "test-acquirer"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post(
            "/topup/confirm",
            json!({"settlement_reference": reference,
                   "customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["bonus_minor"], 150);
    let topup = r.body["data"]["topup_id"].as_str().unwrap().to_string();
    let remaining = || async {
        let r = send(
            shop.app
                .get(&format!(
                    "/incentives/budgets/{budget_id}?merchant_id={}",
                    shop.merchant()
                ))
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"]["remaining_minor"].as_i64().unwrap()
    };
    assert_eq!(remaining().await, 850);

    let no = unattach(&shop, &topup, "wrong customer").await;
    assert_eq!(
        field(&no),
        ("path:transactionId".into(), "not_detachable".into())
    );

    let d = open(&shop, &topup, json!({"reason": "chargeback"})).await;
    assert_eq!(d.status, 200, "{}", d.body);
    let dispute = d.body["data"]["dispute_id"].as_str().unwrap().to_string();
    let won = resolve(&shop, &topup, &dispute, "customer_won").await;
    assert_eq!(won.status, 200, "{}", won.body);
    assert_eq!(
        won.body["data"]["topup_reversal"]["taken_back_minor"],
        2_000
    );
    assert_eq!(
        won.body["data"]["topup_reversal"]["bonus_clawed_back_minor"],
        150
    );
    assert_eq!(
        remaining().await,
        1_000,
        "the bonus went back to its budget"
    );
    let b = shop.balance(&c).await;
    assert_eq!(
        (
            b["actual_minor"].as_i64(),
            b["promo_available_minor"].as_i64()
        ),
        (Some(0), Some(0))
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_top_up_under_dispute_is_not_detached_until_the_dispute_resolves() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let topup = topped_up(&shop, &c.phone).await;
    let d = open(&shop, &topup, json!({"reason": "disputed"})).await;
    assert_eq!(d.status, 200, "{}", d.body);
    let r = unattach(&shop, &topup, "wrong customer").await;
    assert_eq!(r.code(), "CONFLICT", "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);
}
