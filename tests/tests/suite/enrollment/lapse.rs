//! Claims and lapsed windows: locked grants go only to verified customers, and a window
//! that lapses escrows the money until proof.
use super::*;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::json;
use tests::{
    TestApp,
    shop::{Shop, random_phone},
};
use uuid::Uuid;

#[tokio::test]
async fn claims_release_locked_grants_of_verified_customers_only() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let db = &app.server.state.db;

    // Pending proof: a success that releases nothing.
    let (pending, _) = proto_wallet(&shop).await;
    let r = shop
        .post("/claims", json!({"wallet_user_id": pending.wallet_user_id}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "pending_verification");
    assert_eq!(r.body["data"]["released_grants"], json!([]));
    assert_eq!(
        r.body["data"]["skipped_grants"][0]["reason"],
        "not_verified"
    );
    assert_eq!(shop.balance(&pending).await["promo_locked_minor"], 250);

    // Verified with locked grants (an operator credit after verification): one claimable,
    // one already past its expiry.
    let c = shop.customer().await;
    let live = shop.grant(&c, 300, "LOCKED", 3600).await;
    let stale = shop.grant(&c, 50, "LOCKED", 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let key = Uuid::new_v4().to_string();
    let r = shop
        .post_with_key(
            "/claims",
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
            &key,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["state"], "completed");
    assert_eq!(d["released_promo_minor"], 300);
    assert_eq!(d["released_grants"][0]["grant_id"], live.as_str());
    assert_eq!(d["skipped_grants"][0]["grant"]["grant_id"], stale.as_str());
    assert_eq!(d["skipped_grants"][0]["reason"], "expired");
    assert_eq!(d["wallets"][0]["balance"]["promo_available_minor"], 300);

    // A replay, and a second claim with nothing left: both successes, nothing released twice.
    let again = shop
        .post_with_key(
            "/claims",
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
            &key,
        )
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    assert_eq!(again.body["data"], r.body["data"]);
    let r = shop
        .post("/claims", json!({"wallet_user_id": c.wallet_user_id}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "nothing_to_claim");
    assert_eq!(r.body["data"]["released_grants"], json!([]));
    assert_eq!(
        events(db, shop.merchant(), "promo_grant.released")
            .await
            .len(),
        1
    );

    // Unknown, or another tenant's, customer: NOT_FOUND. Neither or both fields: invalid.
    let other = Shop::open(&app).await;
    let theirs = other.customer().await;
    for body in [
        json!({"wallet_user_id": theirs.wallet_user_id}),
        json!({"customer": {"credential_type": "phone", "phone": theirs.phone}}),
    ] {
        let r = shop.post("/claims", body).await;
        assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    }
    // Neither field: invalid. Both naming the same customer: fine; naming two: invalid.
    let r = shop.post("/claims", json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    let r = shop
        .post(
            "/claims",
            json!({"wallet_user_id": c.wallet_user_id, "customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post(
            "/claims",
            json!({"wallet_user_id": c.wallet_user_id, "customer": {"credential_type": "phone", "phone": pending.phone}}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_lapsed_window_expires_the_enrollment_and_escrows_the_money_until_proof() {
    let app = TestApp::spawn_isolated(true, |cfg| {
        cfg.enrollment_window_secs = 2;
        cfg.sweep_interval_secs = 1;
    })
    .await;
    let shop = Shop::open(&app).await;
    let db = &app.server.state.db;
    let (c, grant) = proto_wallet(&shop).await;

    let lapsed = tests::eventually(
        std::time::Duration::from_secs(20),
        "enrollment.expired",
        || async {
            let e = events(db, shop.merchant(), "enrollment.expired").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert_eq!(lapsed.len(), 1);
    assert_eq!(lapsed[0]["escrowed_actual_minor"], 1_000);
    assert_eq!(lapsed[0]["locked_promo_minor"], 250);
    let balance = shop.balance(&c).await;
    assert_eq!(balance["actual_minor"], 0);
    assert_eq!(balance["promo_locked_minor"], 250);
    shop.assert_ledger_consistent().await;

    // The escrow is in the ledger, on the merchant's escrow account for this wallet.
    let escrow = api::store::ledger::account_balance(
        db,
        api::domain::ledger::Account::MerchantEscrow(Uuid::parse_str(&c.wallet_id).unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(escrow, 1_000);

    // The cashier sees it; identification says not_found; payment is refused.
    let r = tests::send(
        app.get(&format!(
            "/customers/lookup?phone={}",
            c.phone.replace('+', "%2B")
        ))
        .bearer_auth(&shop.token),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["identity_state"], "EXPIRED");
    assert_eq!(r.body["data"]["escrowed_actual_minor"], 1_000);
    assert_eq!(r.body["data"]["customer"]["resolution_state"], "not_found");
    let r = shop.pay(&c, 10).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);

    // Running the expiry again (as a second worker would) changes nothing.
    let again = api::domain::customers::enrollment::expire_due(db, chrono::Utc::now(), None)
        .await
        .unwrap();
    assert_eq!(again, 0);
    assert_eq!(
        events(db, shop.merchant(), "enrollment.expired")
            .await
            .len(),
        1
    );

    // Enrolling again and proving the phone returns the escrow and releases the grant.
    let r = initiate(&shop, &c.phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "PENDING_PROOF");
    assert_eq!(r.body["data"]["sms_sent"], true);
    let sms = shop.sms_after(&c.phone, "enrollment", 0).await;
    let r = shop
        .post(
            "/enroll/verify",
            json!({"verification_token": sms["verification_token"]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["escrow_returned_actual_minor"], 1_000);
    assert_eq!(
        r.body["data"]["released_grants"][0]["grant_id"],
        grant.as_str()
    );
    let balance = shop.balance(&c).await;
    assert_eq!(balance["actual_minor"], 1_000);
    assert_eq!(balance["promo_available_minor"], 250);
    shop.assert_ledger_consistent().await;
    let enrollments = entities::enrollment::Entity::find()
        .filter(entities::enrollment::Column::MerchantId.eq(shop.merchant()))
        .count(db)
        .await
        .unwrap();
    assert_eq!(enrollments, 2, "the lapsed window and the new one");
    app.stop().await;
}

#[tokio::test]
async fn a_token_or_code_from_a_lapsed_window_is_expired_and_changes_nothing() {
    let app = TestApp::spawn_isolated(true, |cfg| {
        cfg.enrollment_window_secs = 2;
        cfg.sweep_interval_secs = 1;
    })
    .await;
    let shop = Shop::open(&app).await;
    let db = &app.server.state.db;
    let phone = random_phone();
    let r = initiate(&shop, &phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sms = shop.sms_after(&phone, "enrollment", 0).await;
    tests::eventually(
        std::time::Duration::from_secs(20),
        "enrollment.expired",
        || async {
            (!events(db, shop.merchant(), "enrollment.expired")
                .await
                .is_empty())
            .then_some(())
        },
    )
    .await;
    for body in [
        json!({"verification_token": sms["verification_token"]}),
        json!({"code": sms["code"], "phone": phone}),
    ] {
        let r = shop.post("/enroll/verify", body.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
            "{body}: {}",
            r.body
        );
    }
    assert!(
        events(db, shop.merchant(), "enrollment.verified")
            .await
            .is_empty()
    );
    let identity = entities::wallet_user::Entity::find()
        .filter(entities::wallet_user::Column::MerchantId.eq(shop.merchant()))
        .one(db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(identity.state.as_str(), "EXPIRED");
    app.stop().await;
}
