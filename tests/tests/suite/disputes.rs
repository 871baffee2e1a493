//! Corrections after the fact (issue 26.11): a dispute of a payment or top-up fires
//! transaction.disputed when it opens (no money moves) and when it resolves (a customer win
//! refunds the payment or takes the top-up's credit back); detaching a top-up from a
//! customer fires transaction.unattached. Each writes its event in the transaction's own
//! sequence, moves money only through balanced postings, and is a movement in the feed.
use serde_json::{Value, json};
use tests::{
    Reply, TestApp, send,
    shop::{Customer, Shop},
};
use uuid::Uuid;

use super::keys::create;

async fn post(shop: &Shop<'_>, key: &str, path: &str, extra: Value) -> Reply {
    send(
        shop.app
            .post(&format!("/{}{path}", shop.tenant.integration_id))
            .header("x-api-key", key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&shop.body(extra)),
    )
    .await
}

async fn correct(shop: &Shop<'_>, path: &str, extra: Value) -> Reply {
    post(shop, &shop.tenant.platform_key, path, extra).await
}

async fn open(shop: &Shop<'_>, id: &str, extra: Value) -> Reply {
    correct(shop, &format!("/transactions/{id}/disputes"), extra).await
}

async fn resolve(shop: &Shop<'_>, id: &str, dispute: &str, outcome: &str) -> Reply {
    correct(
        shop,
        &format!("/transactions/{id}/disputes/{dispute}/resolve"),
        json!({"outcome": outcome, "note": "case closed"}),
    )
    .await
}

async fn detail(shop: &Shop<'_>, id: &str) -> Value {
    let r = send(
        shop.app
            .get(&format!(
                "/{}/transactions/{id}",
                shop.tenant.integration_id
            ))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].clone()
}

async fn feed(shop: &Shop<'_>) -> Vec<Value> {
    let r = send(
        shop.app
            .get(&format!("/{}/transactions", shop.tenant.integration_id))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().clone()
}

/// The event types of a transaction, in its sequence (which must only grow).
fn event_types(d: &Value) -> Vec<String> {
    let events = d["events"].as_array().unwrap();
    let seqs: Vec<i64> = events
        .iter()
        .map(|e| e["sequence_number"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sequence: {seqs:?}");
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect()
}

/// The one field error of a VALIDATION_ERROR.
fn field(r: &Reply) -> (String, String) {
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    r.field_issues().remove(0)
}

async fn paid(shop: &Shop<'_>, c: &Customer, amount: i64) -> String {
    let p = shop.pay(c, amount).await;
    assert_eq!(p.status, 200, "{}", p.body);
    p.body["data"]["payment_id"].as_str().unwrap().to_string()
}

/// A SKU of 1 000 with a bonus of 100, sold once to `phone`: the top-up's id.
async fn topped_up(shop: &Shop<'_>, phone: &str) -> String {
    let r = send(
        shop.app
            .post("/skus")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(
                &shop.body(json!({"sku_id": "CARD-10", "name": "Top-up card",
                "currency": "EUR", "wallet_credits_minor": 1_000,
                "bonus": {"amount_minor": 100, "expiry_days": 30}})),
            ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post(
            "/topup/sku/CARD-10",
            json!({"pos_order_ref": format!("POS-{}", Uuid::new_v4()),
                   "customer": {"credential_type": "phone", "phone": phone}, "quantity": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["credited_actual_minor"], 1_000);
    r.body["data"]["topup_id"].as_str().unwrap().to_string()
}

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

#[tokio::test]
async fn a_top_up_keyed_to_the_wrong_customer_is_detached_with_its_bonus() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let wrong = shop.customer().await;
    let topup = topped_up(&shop, &wrong.phone).await;
    assert_eq!(shop.balance(&wrong).await["promo_available_minor"], 100);

    let r = correct(
        &shop,
        &format!("/transactions/{topup}/unattach"),
        json!({"reason": "cashier keyed the wrong phone number"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["status"], "reversed");
    assert_eq!(d["topup_reversal"]["kind"], "unattach");
    assert_eq!(d["topup_reversal"]["taken_back_minor"], 1_000);
    assert_eq!(d["topup_reversal"]["bonus_clawed_back_minor"], 100);
    assert_eq!(d["balance_after"]["actual_minor"], 0);
    assert_eq!(d["balance_after"]["promo_available_minor"], 0);

    let t = detail(&shop, &topup).await;
    assert_eq!(t["status"], "reversed");
    assert_eq!(event_types(&t).last().unwrap(), "transaction.unattached");
    let lines = feed(&shop).await;
    assert_eq!(lines[0]["movement"], "unattach");
    assert_eq!(lines[0]["movement_amount_minor"], 1_000);
    assert_eq!(
        lines[1]["movement"], "topup",
        "the credit stays a movement of its time"
    );

    // The till rings the sale again for the right customer under a new order.
    let right = shop.customer().await;
    let r = shop
        .post(
            "/topup/sku/CARD-10",
            json!({"pos_order_ref": format!("POS-{}", Uuid::new_v4()),
                   "customer": {"credential_type": "phone", "phone": right.phone}, "quantity": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(shop.balance(&right).await["actual_minor"], 1_000);

    let again = correct(
        &shop,
        &format!("/transactions/{topup}/unattach"),
        json!({"reason": "twice"}),
    )
    .await;
    assert_eq!(
        field(&again),
        ("path:transactionId".into(), "nothing_to_detach".into())
    );
    let dispute = open(&shop, &topup, json!({"reason": "late"})).await;
    assert_eq!(
        field(&dispute),
        ("path:transactionId".into(), "nothing_to_dispute".into())
    );

    // A wallet payment was paid from the customer's own wallet: it is refunded, not detached.
    shop.fund(&wrong, 500).await;
    let payment = paid(&shop, &wrong, 200).await;
    let no = correct(
        &shop,
        &format!("/transactions/{payment}/unattach"),
        json!({"reason": "wrong"}),
    )
    .await;
    assert_eq!(
        field(&no),
        ("path:transactionId".into(), "not_detachable".into())
    );
    assert_eq!(shop.balance(&wrong).await["actual_minor"], 300);
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
    let r = correct(
        &shop,
        &format!("/transactions/{topup}/unattach"),
        json!({"reason": "wrong customer"}),
    )
    .await;
    assert_eq!(r.code(), "CONFLICT", "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);
}

#[tokio::test]
async fn corrections_need_their_permission_and_never_reach_another_integration() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let payment = paid(&shop, &c, 400).await;

    // A per-merchant key minted without a set runs a till and reads the feed only.
    let k = create(&app, &shop.tenant.platform_key, &shop.tenant, json!({})).await;
    assert_eq!(k.status, 200, "{}", k.body);
    let till_key = k.body["data"]["raw_key"].as_str().unwrap().to_string();
    let r = post(
        &shop,
        &till_key,
        &format!("/transactions/{payment}/disputes"),
        json!({"reason": "x"}),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["missing_permissions"],
        json!(["corrections"])
    );

    // Another tenant's platform key: its own integration in the path finds nothing of ours
    // but FORBIDDEN (the transaction reads' rule), ours in the path is FORBIDDEN too.
    for integration in [other.tenant.integration_id, shop.tenant.integration_id] {
        let r = send(
            app.post(&format!("/{integration}/transactions/{payment}/disputes"))
                .header("x-api-key", &other.tenant.platform_key)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(&other.body(json!({"reason": "probe"}))),
        )
        .await;
        assert_eq!(r.code(), "FORBIDDEN", "{}", r.body);
    }
    let unknown = open(&shop, &Uuid::now_v7().to_string(), json!({"reason": "x"})).await;
    assert_eq!(unknown.code(), "NOT_FOUND", "{}", unknown.body);
    assert!(
        detail(&shop, &payment).await["disputes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// A top-up keyed to an unknown phone opens a proto-wallet; when its enrollment window
/// lapses the credit moves into the merchant's escrow for that wallet, to come back on
/// verification. Detaching the top-up takes it from the escrow, so it never reaches the
/// wrong customer later.
#[tokio::test]
async fn detaching_a_top_up_whose_enrollment_lapsed_takes_its_credit_from_escrow() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let app = TestApp::spawn_isolated(true, |cfg| {
        cfg.enrollment_window_secs = 2;
        cfg.sweep_interval_secs = 1;
    })
    .await;
    let shop = Shop::open(&app).await;
    let db = &app.server.state.db;
    let stranger = tests::shop::random_phone();
    let topup = topped_up(&shop, &stranger).await;
    let t = detail(&shop, &topup).await;
    let wallet = Uuid::parse_str(t["topup"]["wallet_id"].as_str().unwrap()).unwrap();
    let escrow = || async {
        api::store::ledger::account_balance(
            db,
            api::domain::ledger::Account::MerchantEscrow(wallet),
        )
        .await
        .unwrap()
    };
    tests::eventually(
        std::time::Duration::from_secs(20),
        "enrollment.expired",
        || async {
            let lapsed = entities::outbox::Entity::find()
                .filter(entities::outbox::Column::MerchantId.eq(shop.merchant()))
                .filter(entities::outbox::Column::Topic.eq("enrollment.expired"))
                .all(db)
                .await
                .unwrap();
            (!lapsed.is_empty()).then_some(())
        },
    )
    .await;
    assert_eq!(escrow().await, 1_000);

    let r = correct(
        &shop,
        &format!("/transactions/{topup}/unattach"),
        json!({"reason": "cashier keyed the wrong phone number"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["topup_reversal"]["taken_back_minor"], 1_000);
    assert_eq!(d["topup_reversal"]["unrecovered_minor"], 0);
    assert_eq!(
        d["topup_reversal"]["bonus_clawed_back_minor"], 100,
        "the LOCKED bonus"
    );
    assert_eq!(escrow().await, 0);
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

    let no = correct(
        &shop,
        &format!("/transactions/{topup}/unattach"),
        json!({"reason": "wrong customer"}),
    )
    .await;
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
