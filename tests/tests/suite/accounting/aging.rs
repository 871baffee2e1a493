//! Aging, dormancy and breakage (`liability_aging`, `dormant_wallets`, the roll-forward's
//! breakage estimate) against a merchant's policy (`GET/PUT …/accounting/policy`): actual
//! money bucketed by days since the wallet's last customer-initiated movement, the wallets
//! past the dormancy period listed, and breakage estimated by the policy's method without
//! ever touching the ledger.
use serde_json::{Value, json};
use tests::finance::{advance_days, clock_today, rows};
use tests::{TestApp, send, shop::Shop};

async fn set_policy(shop: &Shop<'_>, days: i64, bp: i64, method: &str) -> tests::Reply {
    let path = format!("/{}/accounting/policy", shop.tenant.integration_id);
    send(
        shop.app
            .put(&path)
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&shop.body(
                json!({"dormancy_days": days, "breakage_rate_bp": bp, "breakage_method": method}),
            )),
    )
    .await
}

#[tokio::test]
async fn aging_dormancy_and_breakage_follow_the_last_customer_movement_and_the_policy() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let policy = format!(
        "/{}/accounting/policy?merchant_id={}",
        shop.tenant.integration_id,
        shop.merchant()
    );
    let defaults = shop.read(&policy).await;
    assert_eq!(defaults.status, 200, "{}", defaults.body);
    assert_eq!(defaults.body["data"]["dormancy_days"], 1095);
    assert_eq!(defaults.body["data"]["updated_at"], Value::Null);
    let refused = set_policy(&shop, 5, 10_000, "guess").await;
    assert_eq!(refused.code(), "VALIDATION_ERROR", "{}", refused.body);
    let set = set_policy(&shop, 90, 1_000, "proportional").await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(shop.read(&policy).await.body["data"]["dormancy_days"], 90);

    // Day 0: the old customer pays once, then goes quiet.
    let start = clock_today(&shop).await;
    let old = shop.customer().await;
    shop.fund(&old, 4_000).await;
    assert_eq!(shop.pay(&old, 1_000).await.status, 200);
    advance_days(&shop, 100).await;
    // Day 100: a new customer.
    let new = shop.customer().await;
    shop.fund(&new, 2_000).await;
    assert_eq!(shop.pay(&new, 500).await.status, 200);
    advance_days(&shop, 1).await;
    let day100 = clock_today(&shop).await.pred_opt().unwrap();
    assert_eq!((day100 - start).num_days(), 100);

    let aging = rows(
        &shop,
        json!({"type": "liability_aging", "as_of": day100.to_string()}),
    )
    .await;
    assert_eq!(aging.len(), 7, "one row per bucket: {aging:?}");
    let bucket = |label: &str| aging.iter().find(|r| r["bucket"] == label).unwrap().clone();
    assert_eq!(bucket("0-30")["wallets"], 1);
    assert_eq!(bucket("0-30")["actual_minor"], 1_500);
    assert_eq!(bucket("91-180")["wallets"], 1);
    assert_eq!(bucket("91-180")["actual_minor"], 3_000);
    let total: i64 = aging
        .iter()
        .map(|r| r["actual_minor"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 4_500, "the buckets hold all the actual money");

    let dormant = rows(
        &shop,
        json!({"type": "dormant_wallets", "as_of": day100.to_string()}),
    )
    .await;
    assert_eq!(dormant.len(), 1, "{dormant:?}");
    assert_eq!(dormant[0]["wallet_id"], old.wallet_id.as_str());
    assert_eq!(dormant[0]["actual_minor"], 3_000);
    assert_eq!(dormant[0]["dormancy_days"], 90);
    assert!(dormant[0]["days_inactive"].as_i64().unwrap() >= 100);

    // Proportional: the day's 500 redeemed recognises 500 × 10% / 90% = 55 (rounded down).
    let day = rows(
        &shop,
        json!({"type": "liability_rollforward", "from": day100.to_string(), "to": day100.to_string()}),
    )
    .await;
    let actual = day.iter().find(|r| r["class"] == "actual").unwrap();
    assert_eq!(actual["breakage_method"], "proportional");
    assert_eq!(actual["redemptions_minor"], -500);
    assert_eq!(actual["breakage_estimate_minor"], 55);

    // Remote: the old wallet's 3,000 on the day it became dormant (day 90), nothing else.
    assert_eq!(set_policy(&shop, 90, 1_000, "remote").await.status, 200);
    let from = day100 - chrono::Duration::days(15);
    let range = rows(
        &shop,
        json!({"type": "liability_rollforward", "from": from.to_string(), "to": day100.to_string()}),
    )
    .await;
    let crossed = start + chrono::Duration::days(90);
    for r in range.iter().filter(|r| r["class"] == "actual") {
        let expected = if r["date"] == crossed.to_string() {
            3_000
        } else {
            0
        };
        assert_eq!(r["breakage_estimate_minor"], expected, "{r}");
        assert_eq!(r["breakage_method"], "remote");
    }
    // An estimate only: the customers can still spend every unit.
    assert_eq!(shop.balance(&old).await["actual_minor"], 3_000);
    shop.assert_ledger_consistent().await;

    let audit = send(
        app.get("/operator/audit-log?action=accounting_policy.set&limit=200")
            .header("x-operator-key", &shop.operator_key),
    )
    .await;
    assert!(
        audit.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["target_id"] == shop.merchant().to_string()),
        "{}",
        audit.body
    );
    app.stop().await;
}
