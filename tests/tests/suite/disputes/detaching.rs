//! Detaching a SKU top-up from the customer it was wrongly attached to.
use super::*;

#[tokio::test]
async fn a_top_up_keyed_to_the_wrong_customer_is_detached_with_its_bonus() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let wrong = shop.customer().await;
    let topup = topped_up(&shop, &wrong.phone).await;
    assert_eq!(shop.balance(&wrong).await["promo_available_minor"], 100);

    let r = unattach(&shop, &topup, "cashier keyed the wrong phone number").await;
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

    let again = unattach(&shop, &topup, "twice").await;
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
    let no = unattach(&shop, &payment, "wrong").await;
    assert_eq!(
        field(&no),
        ("path:transactionId".into(), "not_detachable".into())
    );
    assert_eq!(shop.balance(&wrong).await["actual_minor"], 300);
    shop.assert_ledger_consistent().await;
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

    let r = unattach(&shop, &topup, "cashier keyed the wrong phone number").await;
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
