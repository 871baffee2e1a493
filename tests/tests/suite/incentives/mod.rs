//! Settlement-backed top-ups, reload-bonus tiers and cashback, as the spec's "Top-up" and
//! "Incentives" rules state them: a settled reference credits once with the bonus of the
//! config in force at confirmation; bad configs change nothing; cashback accrues with the
//! payment and a refund or void takes back its share, never actual money.
mod cashback;

use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    TestApp, send,
    shop::{Shop, random_phone},
};
use uuid::Uuid;

async fn settle(shop: &Shop<'_>, reference: &str, amount: i64, state: &str) -> tests::Reply {
    shop.control(
        "/topup/settlements",
        json!({"reference": reference, "amount_minor": amount, "currency": "EUR", "state": state,
               "provider": "test-acquirer"}),
    )
    .await
}

async fn confirm(shop: &Shop<'_>, reference: &str, phone: &str) -> tests::Reply {
    shop.post(
        "/topup/confirm",
        json!({"settlement_reference": reference, "amount_minor": 1,
               "customer": {"credential_type": "phone", "phone": phone}}),
    )
    .await
}

async fn configure(shop: &Shop<'_>, tiers: Value, expiry_days: Value) -> tests::Reply {
    shop.control(
        "/topup/reload-bonus/config",
        json!({"wallet_program_id": shop.tenant.wallet_program_id.to_string(), "currency": "EUR",
               "tiers": tiers, "expiry_days": expiry_days}),
    )
    .await
}

async fn events(app: &TestApp, merchant: Uuid, topic: &str) -> Vec<entities::outbox::Model> {
    entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(merchant))
        .filter(entities::outbox::Column::Topic.eq(topic))
        .all(&app.server.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_settled_reference_credits_once_with_the_reload_bonus_in_force_at_confirmation() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let in_force = format!(
        "/topup/reload-bonus/config?wallet_program_id={}",
        shop.tenant.wallet_program_id
    );
    let none = shop.read(&in_force).await;
    assert_eq!(
        (none.status, none.code()),
        (404, "NOT_FOUND"),
        "{}",
        none.body
    );
    let r = configure(
        &shop,
        json!([{"min_amount_minor": 1_000, "max_amount_minor": 4_999, "bonus_minor": 100},
               {"min_amount_minor": 5_000, "bonus_percent_bps": 1_000}]),
        json!(30),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["version"], 1);

    assert_eq!(settle(&shop, "ST-1", 6_000, "SETTLED").await.status, 200);
    let settlement = shop.read("/topup/settlements/ST-1").await;
    assert_eq!(settlement.status, 200, "{}", settlement.body);
    let sd = &settlement.body["data"];
    assert_eq!(
        (&sd["amount_minor"], &sd["state"], &sd["used"]),
        (&json!(6_000), &json!("SETTLED"), &json!(false))
    );
    let first = confirm(&shop, "ST-1", &c.phone).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let d = &first.body["data"];
    assert_eq!(
        d["credited_actual_minor"], 6_000,
        "the settlement's amount, not the body's"
    );
    assert_eq!(d["bonus_minor"], 600);
    assert_eq!(d["bonus_state"], "RELEASED");
    assert_eq!(d["bonus_config_version"], 1);
    assert_eq!(d["balance_after"]["actual_minor"], 6_000);
    assert_eq!(d["balance_after"]["promo_available_minor"], 600);

    // A reference credits once, whoever asks again.
    let again = confirm(&shop, "ST-1", &c.phone).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert_eq!(again.code(), "VALIDATION_ERROR");
    assert_eq!(
        again.field_issues(),
        vec![(
            "/settlement_reference".to_string(),
            "settlement_already_used".to_string()
        )]
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 6_000);

    // A new config applies to later confirmations only.
    let r = configure(
        &shop,
        json!([{"min_amount_minor": 1, "bonus_minor": 50}]),
        json!(7),
    )
    .await;
    assert_eq!(r.body["data"]["version"], 2);
    // The config in force reads back as the latest version, as it was set.
    let read = shop.read(&in_force).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["data"]["version"], 2);
    assert_eq!(read.body["data"]["expiry_days"], 7);
    assert_eq!(
        read.body["data"]["tiers"][0]["bonus_minor"], 50,
        "{}",
        read.body
    );
    // The reference, once used, says which top-up used it.
    let used = shop.read("/topup/settlements/ST-1").await;
    assert_eq!(used.body["data"]["used"], true);
    assert_eq!(
        used.body["data"]["topup_id"], d["topup_id"],
        "{}",
        used.body
    );
    assert_eq!(
        shop.read("/topup/settlements/NO-SUCH-REF").await.code(),
        "NOT_FOUND"
    );
    settle(&shop, "ST-2", 6_000, "SETTLED").await;
    let second = confirm(&shop, "ST-2", &c.phone).await;
    assert_eq!(second.body["data"]["bonus_minor"], 50);
    assert_eq!(second.body["data"]["bonus_config_version"], 2);
    let first_grant = Uuid::parse_str(d["bonus_grant_id"].as_str().unwrap()).unwrap();
    let g = entities::promo_grant::Entity::find_by_id(first_grant)
        .one(&app.server.state.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (g.original_minor, g.source.as_str()),
        (600, "RELOAD_BONUS"),
        "the earlier bonus is untouched"
    );
    let first_topup = entities::topup::Entity::find()
        .filter(entities::topup::Column::OrderRef.eq("ST-1"))
        .filter(entities::topup::Column::MerchantId.eq(shop.merchant()))
        .one(&app.server.state.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first_topup.bonus_config_version, Some(1));

    let confirmed = events(&app, shop.merchant(), "topup.confirmed").await;
    assert_eq!(confirmed.len(), 2);
    // A confirm of a settled reference is a transaction born settled: one
    // transaction.settled per top-up.
    assert_eq!(
        events(&app, shop.merchant(), "transaction.settled")
            .await
            .len(),
        2
    );
    let p = &confirmed[0].payload;
    assert_eq!(p["wallet_id"], c.wallet_id.as_str());
    assert_eq!(p["credited_actual_minor"], 6_000);
    assert_eq!(p["currency"], "EUR");
    assert_eq!(
        events(&app, shop.merchant(), "topup.requested").await.len(),
        2
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn unknown_pending_failed_and_foreign_references_get_clear_codes_and_credit_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let c = shop.customer().await;

    let r = confirm(&shop, "NOPE", &c.phone).await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);

    // (A confirm against a PENDING reference requests the top-up: see the next test.)
    assert_eq!(settle(&shop, "ST-P", 2_000, "PENDING").await.status, 200);

    let r = shop
        .control(
            "/topup/settlements",
            json!({"reference": "ST-P", "amount_minor": 2_000, "currency": "EUR",
                   "state": "FAILED", "failure_reason": "card declined"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "FAILED");
    let failed = events(&app, shop.merchant(), "topup.failed").await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].payload["failure_reason"], "card declined");
    let r = confirm(&shop, "ST-P", &c.phone).await;
    assert_eq!(
        r.field_issues(),
        vec![(
            "/settlement_reference".to_string(),
            "settlement_failed".to_string()
        )]
    );

    // A failed reference stays failed; a reference's amount never changes.
    let r = settle(&shop, "ST-P", 2_000, "SETTLED").await;
    assert_eq!(
        r.field_issues(),
        vec![("/state".to_string(), "invalid_transition".to_string())]
    );
    let r = settle(&shop, "ST-P", 9_000, "FAILED").await;
    assert_eq!(
        r.field_issues(),
        vec![("/reference".to_string(), "already_reported".to_string())]
    );

    // Another tenant's settled reference does not exist for this one.
    assert_eq!(settle(&other, "ST-X", 2_000, "SETTLED").await.status, 200);
    let r = confirm(&shop, "ST-X", &c.phone).await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));

    // Bad ingest input changes nothing.
    let r = shop
        .control(
            "/topup/settlements",
            json!({"reference": "", "amount_minor": 0, "currency": "EURO", "state": "DONE"}),
        )
        .await;
    assert_eq!(r.code(), "VALIDATION_ERROR");
    let fields: Vec<String> = r.field_issues().into_iter().map(|(f, _)| f).collect();
    for f in ["/reference", "/amount_minor", "/currency", "/state"] {
        assert!(fields.iter().any(|x| x == f), "{f} in {fields:?}");
    }

    assert_eq!(shop.balance(&c).await["actual_minor"], 0);
    assert_eq!(
        entities::topup::Entity::find()
            .filter(entities::topup::Column::MerchantId.eq(shop.merchant()))
            .count(&app.server.state.db)
            .await
            .unwrap(),
        0
    );
    shop.assert_ledger_consistent().await;
}

/// `pending_topups_minor` "must count top-ups that are initiated but not yet confirmed by
/// their settlement, and fall when they confirm or fail": a confirm against a PENDING
/// reference requests the top-up; the report that settles it credits it (with the reload
/// bonus in force then) and the one that fails it drops it, each with its event.
#[tokio::test]
async fn a_top_up_requested_against_a_pending_reference_is_pending_until_it_settles_or_fails() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    assert_eq!(
        configure(
            &shop,
            json!([{"min_amount_minor": 1, "bonus_minor": 150}]),
            json!(30)
        )
        .await
        .status,
        200
    );
    assert_eq!(settle(&shop, "ST-A", 4_000, "PENDING").await.status, 200);
    assert_eq!(settle(&shop, "ST-B", 1_500, "PENDING").await.status, 200);

    let a = confirm(&shop, "ST-A", &c.phone).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["data"]["status"], "pending");
    assert_eq!(a.body["data"]["credited_actual_minor"], 0);
    assert_eq!(
        a.body["data"]["balance_after"]["pending_topups_minor"],
        4_000
    );
    assert_eq!(a.body["data"]["balance_after"]["actual_minor"], 0);
    let b = confirm(&shop, "ST-B", &c.phone).await;
    assert_eq!(
        b.body["data"]["balance_after"]["pending_topups_minor"],
        5_500
    );
    let again = confirm(&shop, "ST-A", &c.phone).await;
    assert_eq!(
        again.field_issues(),
        vec![(
            "/settlement_reference".to_string(),
            "settlement_already_used".to_string()
        )]
    );
    // Not money yet: not spendable, not in the feed.
    assert_eq!(shop.pay(&c, 1).await.code(), "INSUFFICIENT_FUNDS");
    let feed = send(
        app.get(&format!("/{}/transactions", shop.tenant.integration_id))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(
        feed.body["data"].as_array().unwrap().len(),
        0,
        "{}",
        feed.body
    );

    assert_eq!(settle(&shop, "ST-A", 4_000, "SETTLED").await.status, 200);
    let balance = shop.balance(&c).await;
    assert_eq!(balance["pending_topups_minor"], 1_500);
    assert_eq!(balance["actual_minor"], 4_000);
    assert_eq!(
        balance["promo_available_minor"], 150,
        "the reload bonus accrued"
    );
    let confirmed = events(&app, shop.merchant(), "topup.confirmed").await;
    assert_eq!(confirmed.len(), 1);
    assert_eq!(confirmed[0].payload["credited_actual_minor"], 4_000);
    assert_eq!(confirmed[0].payload["topup_id"], a.body["data"]["topup_id"]);
    // The top-up is the transaction that settled, in its own sequence after its credit.
    let settled = events(&app, shop.merchant(), "transaction.settled").await;
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].resource_type, "topup");
    assert_eq!(
        settled[0].payload["transaction_id"],
        a.body["data"]["topup_id"]
    );
    assert_eq!(settled[0].payload["settlement_reference"], "ST-A");
    assert_eq!(settled[0].payload["amount_minor"], 4_000);

    let r = shop
        .control(
            "/topup/settlements",
            json!({"reference": "ST-B", "amount_minor": 1_500, "currency": "EUR",
                   "state": "FAILED", "failure_reason": "card declined"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let balance = shop.balance(&c).await;
    assert_eq!(balance["pending_topups_minor"], 0);
    assert_eq!(balance["actual_minor"], 4_000);
    let failed = events(&app, shop.merchant(), "topup.failed").await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].payload["topup_id"], b.body["data"]["topup_id"]);
    assert_eq!(failed[0].payload["wallet_id"], c.wallet_id.as_str());

    let detail = |id: &Value| {
        format!(
            "/{}/transactions/{}",
            shop.tenant.integration_id,
            id.as_str().unwrap()
        )
    };
    let get = |path: String| {
        send(
            app.get(&path)
                .header("x-api-key", &shop.tenant.platform_key),
        )
    };
    assert_eq!(
        get(detail(&a.body["data"]["topup_id"])).await.body["data"]["status"],
        "completed"
    );
    assert_eq!(
        get(detail(&b.body["data"]["topup_id"])).await.body["data"]["status"],
        "failed"
    );
    let feed = get(format!("/{}/transactions", shop.tenant.integration_id)).await;
    assert_eq!(
        feed.body["data"].as_array().unwrap().len(),
        1,
        "the credited one only"
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn ten_concurrent_confirms_of_one_reference_credit_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    settle(&shop, "ST-C", 3_000, "SETTLED").await;
    let replies =
        futures::future::join_all((0..10).map(|_| confirm(&shop, "ST-C", &c.phone))).await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    assert_eq!(
        ok,
        1,
        "{:?}",
        replies.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!(r.code(), "VALIDATION_ERROR", "{}", r.body);
    }
    assert_eq!(shop.balance(&c).await["actual_minor"], 3_000);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_confirm_for_an_unknown_phone_holds_the_credit_and_locks_the_bonus() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    configure(
        &shop,
        json!([{"min_amount_minor": 1, "bonus_minor": 200}]),
        Value::Null,
    )
    .await;
    settle(&shop, "ST-U", 1_000, "SETTLED").await;
    let phone = random_phone();
    let r = confirm(&shop, "ST-U", &phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["customer_state"], "PENDING_PROOF");
    assert_eq!(r.body["data"]["bonus_state"], "LOCKED");
    assert_eq!(r.body["data"]["balance_after"]["actual_minor"], 1_000);
    assert_eq!(r.body["data"]["balance_after"]["promo_locked_minor"], 200);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn bad_reload_configs_are_rejected_and_nothing_is_written() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let overlap = configure(
        &shop,
        json!([{"min_amount_minor": 1_000, "max_amount_minor": 5_000, "bonus_minor": 100},
               {"min_amount_minor": 5_000, "bonus_minor": 500}]),
        json!(30),
    )
    .await;
    assert_eq!(overlap.status, 400, "{}", overlap.body);
    assert_eq!(
        overlap.field_issues(),
        vec![("/tiers/1".to_string(), "overlap".to_string())]
    );
    let message = overlap.body["error"]["details"]["fields"][0]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("/tiers/0"), "names both tiers: {message}");

    let cases = [
        (
            json!([{"min_amount_minor": 1, "bonus_minor": 1}]),
            json!(0),
            "/expiry_days",
        ),
        (json!([]), json!(30), "/tiers"),
        (
            json!([{"min_amount_minor": 1.5, "bonus_minor": 1}]),
            json!(30),
            "/tiers/0/min_amount_minor",
        ),
        (
            json!([{"min_amount_minor": 1, "bonus_minor": 1, "bonus_percent_bps": 10}]),
            json!(30),
            "/tiers/0",
        ),
    ];
    for (tiers, days, field) in cases {
        let r = configure(&shop, tiers.clone(), days.clone()).await;
        assert_eq!(r.code(), "VALIDATION_ERROR", "{tiers} {days}: {}", r.body);
        assert!(
            r.field_issues().iter().any(|(f, _)| f == field),
            "{field} in {}",
            r.body
        );
    }
    let r = shop
        .control(
            "/topup/reload-bonus/config",
            json!({"wallet_program_id": shop.tenant.wallet_program_id.to_string(), "currency": "EU",
                   "tiers": [{"min_amount_minor": 1, "bonus_minor": 1}]}),
        )
        .await;
    assert!(
        r.field_issues().iter().any(|(f, _)| f == "/currency"),
        "{}",
        r.body
    );
    assert_eq!(
        entities::reload_bonus_config::Entity::find()
            .filter(entities::reload_bonus_config::Column::MerchantId.eq(shop.merchant()))
            .count(&app.server.state.db)
            .await
            .unwrap(),
        0
    );
}
