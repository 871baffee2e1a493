//! Verifying an enrollment: by code or link token, exactly one proof, capped wrong codes
//! and resends.
use super::*;
use sea_orm::EntityTrait;
use serde_json::json;
use tests::{
    TestApp,
    shop::{Shop, random_phone},
};
use uuid::Uuid;

#[tokio::test]
async fn verify_by_link_token_links_the_provider_id_and_the_token_works_once() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let db = &app.server.state.db;
    let phone = random_phone();
    let pid = format!("pos-{}", Uuid::new_v4().simple());
    let r = shop
        .post(
            "/enroll/initiate",
            json!({"phone": phone, "provider_customer_id": pid, "language": "de"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let wallet_user = r.body["data"]["wallet_user_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        events(db, shop.merchant(), "customer.enrolled").await.len(),
        1
    );
    let sms = shop.sms_after(&phone, "enrollment", 0).await;
    assert!(sms["body"].as_str().unwrap().starts_with("Ihr"), "{sms}");
    let token = sms["verification_token"].as_str().unwrap().to_string();

    // The provider id is not linked before proof.
    let identity =
        entities::wallet_user::Entity::find_by_id(Uuid::parse_str(&wallet_user).unwrap())
            .one(db)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(identity.provider_customer_id, None);

    // A tampered token: validation error, nothing changes.
    let mut tampered = token.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'a' { 'b' } else { 'a' });
    let r = shop
        .post("/enroll/verify", json!({"verification_token": tampered}))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );

    // Another tenant cannot use the token.
    let other = Shop::open(&app).await;
    let r = other
        .post("/enroll/verify", json!({"verification_token": token}))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );

    let key = Uuid::new_v4().to_string();
    let r = shop
        .post_with_key("/enroll/verify", json!({"verification_token": token}), &key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["provider_customer_id_linked"], true);
    let identity =
        entities::wallet_user::Entity::find_by_id(Uuid::parse_str(&wallet_user).unwrap())
            .one(db)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(identity.state.as_str(), "VERIFIED");
    assert_eq!(identity.provider_customer_id.as_deref(), Some(pid.as_str()));

    // The same key replays the success byte for byte.
    let again = shop
        .post_with_key("/enroll/verify", json!({"verification_token": token}), &key)
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    assert_eq!(again.body["data"], r.body["data"]);
    // A new request with the used token is refused.
    let reused = shop
        .post("/enroll/verify", json!({"verification_token": token}))
        .await;
    assert_eq!(
        (reused.status, reused.code()),
        (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
        "{}",
        reused.body
    );
    assert_eq!(
        events(db, shop.merchant(), "enrollment.verified")
            .await
            .len(),
        1
    );

    // A second enrollment of the verified phone is a success with no second SMS.
    let r = initiate(&shop, &phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "VERIFIED");
    assert_eq!(r.body["data"]["sms_sent"], false);
    let r = shop.post("/enroll/resend", json!({"phone": phone})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["sms_sent"], false);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(shop.sms_count(&phone, "enrollment").await, 1);
    app.stop().await;
}

#[tokio::test]
async fn verify_needs_exactly_one_proof_and_a_six_digit_code() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let phone = random_phone();
    for body in [
        json!({}),
        json!({"verification_token": "ev1.x.y", "code": "123456", "phone": phone}),
        json!({"code": "12345", "phone": phone}),
        json!({"code": "1234567", "phone": phone}),
        json!({"code": "12a456", "phone": phone}),
        json!({"code": "１２３４５６", "phone": phone}),
        json!({"code": "123456", "phone": "not a phone"}),
    ] {
        let r = shop.post("/enroll/verify", body.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{body}: {}",
            r.body
        );
        assert!(!r.field_issues().is_empty(), "{body}");
    }
    // A code alone from a request that names no till either says nothing of whose it is.
    let mut bare = shop.body(json!({"code": "123456"}));
    bare["context"]
        .as_object_mut()
        .unwrap()
        .remove("terminal_id");
    let r = shop.post_body("/enroll/verify", &bare).await;
    r.assert_field_error("/phone");
    let r = initiate(&shop, "0049 not a number").await;
    assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"));
    assert_eq!(r.field_issues()[0].0, "/phone");
    // A code for a phone with no enrollment.
    let r = shop
        .post("/enroll/verify", json!({"code": "123456", "phone": phone}))
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
}

#[tokio::test]
async fn wrong_codes_are_capped_then_rate_limited_and_resend_is_limited() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let phone = random_phone();
    let r = initiate(&shop, &phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let enrollment_id = r.body["data"]["enrollment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let code = shop.sms_after(&phone, "enrollment", 0).await["code"]
        .as_str()
        .unwrap()
        .to_string();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    for left in (0..5).rev() {
        let r = shop
            .post(
                "/enroll/verify",
                json!({"code": wrong, "enrollment_id": enrollment_id}),
            )
            .await;
        assert_eq!((r.status, r.code()), (400, "OTP_INVALID"), "{}", r.body);
        assert_eq!(r.body["error"]["details"]["attempts_remaining"], left);
    }
    // Even the right code is refused now, until a resend issues a new one.
    let r = shop
        .post(
            "/enroll/verify",
            json!({"code": code, "enrollment_id": enrollment_id}),
        )
        .await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    assert!(r.headers.get("retry-after").is_some());

    // Resend within the cooldown: rate limited.
    let r = shop.post("/enroll/resend", json!({"phone": phone})).await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    assert!(r.headers.get("retry-after").is_some());
    // Past it (moved back in the database instead of waiting a minute): a new code.
    let db = &app.server.state.db;
    let id = Uuid::parse_str(&enrollment_id).unwrap();
    let mut e = entities::enrollment::Entity::find_by_id(id)
        .one(db)
        .await
        .unwrap()
        .unwrap();
    e.last_sent_at = Some(chrono::Utc::now() - chrono::Duration::seconds(61));
    api::store::customers::enrollments::update(db, e)
        .await
        .unwrap();
    let r = shop.post("/enroll/resend", json!({"phone": phone})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["sms_sent"], true);
    assert_eq!(r.body["data"]["sends_remaining"], 3);
    let fresh = shop.sms_after(&phone, "enrollment", 1).await["code"]
        .as_str()
        .unwrap()
        .to_string();
    let r = shop
        .post("/enroll/verify", json!({"code": fresh, "phone": phone}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    app.stop().await;
}

#[tokio::test]
async fn resend_is_capped_per_window() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let phone = random_phone();
    let r = initiate(&shop, &phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = Uuid::parse_str(r.body["data"]["enrollment_id"].as_str().unwrap()).unwrap();
    let db = &app.server.state.db;
    for n in 2..=6 {
        let mut e = entities::enrollment::Entity::find_by_id(id)
            .one(db)
            .await
            .unwrap()
            .unwrap();
        e.last_sent_at = Some(chrono::Utc::now() - chrono::Duration::seconds(61));
        api::store::customers::enrollments::update(db, e)
            .await
            .unwrap();
        let r = shop
            .post("/enroll/resend", json!({"enrollment_id": id}))
            .await;
        if n <= 5 {
            assert_eq!(r.status, 200, "send {n}: {}", r.body);
        } else {
            assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
        }
    }
    // A second initiate while the window is open sends nothing either.
    let r = initiate(&shop, &phone).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"]["sms_sent"], false);
    // Resend for a phone never enrolled: NOT_FOUND.
    let r = shop
        .post("/enroll/resend", json!({"phone": random_phone()}))
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
}

#[tokio::test]
async fn concurrent_verifies_of_one_identity_release_each_grant_once() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let db = &app.server.state.db;
    let (c, _) = proto_wallet(&shop).await;
    shop.grant(&c, 100, "LOCKED", 7200).await;
    let r = initiate(&shop, &c.phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sms = shop.sms_after(&c.phone, "enrollment", 0).await;
    let token = sms["verification_token"].as_str().unwrap().to_string();
    let code = sms["code"].as_str().unwrap().to_string();

    let attempts = (0..8).map(|i| {
        let body = if i % 2 == 0 {
            json!({"verification_token": token})
        } else {
            json!({"code": code, "phone": c.phone})
        };
        let shop = &shop;
        async move { shop.post("/enroll/verify", body).await }
    });
    let replies = futures::future::join_all(attempts).await;
    let ok: Vec<_> = replies.iter().filter(|r| r.status == 200).collect();
    assert_eq!(
        ok.len(),
        1,
        "{:?}",
        replies.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body);
    }
    assert_eq!(ok[0].body["data"]["released_promo_minor"], 350);
    assert_eq!(
        events(db, shop.merchant(), "promo_grant.released")
            .await
            .len(),
        2
    );
    assert_eq!(
        events(db, shop.merchant(), "enrollment.verified")
            .await
            .len(),
        1
    );
    let balance = shop.balance(&c).await;
    assert_eq!(balance["promo_available_minor"], 350);
    assert_eq!(balance["actual_minor"], 1_000);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn an_enrollment_started_in_a_checkout_session_verifies_by_code_alone() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let r = shop.post("/checkout/sessions", json!({})).await;
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let phone = random_phone();
    let mut body = shop.body(json!({"phone": phone}));
    body["context"]["service_session_id"] = json!(session);
    let r = shop.post_body("/enroll/initiate", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let code = shop.sms_after(&phone, "enrollment", 0).await["code"]
        .as_str()
        .unwrap()
        .to_string();
    let mut body = shop.body(json!({"code": code}));
    body["context"]["service_session_id"] = json!(session);
    let r = shop.post_body("/enroll/verify", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "VERIFIED");

    // A cancelled session cannot start an enrollment.
    let r = shop.post("/checkout/sessions", json!({})).await;
    let closed = r.body["data"]["session_id"].as_str().unwrap().to_string();
    shop.post(&format!("/checkout/sessions/{closed}/cancel"), json!({}))
        .await;
    let mut body = shop.body(json!({"phone": random_phone()}));
    body["context"]["service_session_id"] = json!(closed);
    let r = shop.post_body("/enroll/initiate", &body).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    app.stop().await;
}

/// "Exactly one of verification_token or code must be supplied": a code alone, keyed at the
/// till that started the enrollment, verifies it; the same code keyed at another till
/// finds nothing there.
#[tokio::test]
async fn a_code_alone_keyed_at_the_till_that_sent_it_verifies_the_enrollment() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let phone = random_phone();
    let r = initiate(&shop, &phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let code = shop.sms_after(&phone, "enrollment", 0).await["code"]
        .as_str()
        .unwrap()
        .to_string();

    // Another till: a token of its own.
    let elsewhere = shop.at_terminal(Some("till-2")).await;
    let r = elsewhere
        .post("/enroll/verify", json!({"code": code}))
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);

    let r = shop.post("/enroll/verify", json!({"code": code})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "VERIFIED");
    app.stop().await;
}
