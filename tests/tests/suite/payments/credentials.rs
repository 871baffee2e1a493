//! The credentials that authorize a payment: QR nonces, short codes and OTP sessions,
//! each spent once.

use super::*;
use serde_json::json;
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

#[tokio::test]
async fn a_qr_nonce_pays_once_and_a_new_mint_replaces_the_previous_one() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;

    let first = shop.qr(&c).await;
    let second = shop.qr(&c).await;
    assert_ne!(first, second);
    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": first}), 10)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED");

    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": second}), 10)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": second}), 10)
        .await;
    assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body);

    // A same-key retry of a mint returns the same nonce.
    let key = Uuid::new_v4().to_string();
    let body = json!({"customer": {"credential_type": "phone", "phone": c.phone}, "include_short_code": true});
    let a = shop.post_with_key("/qr/mint", body.clone(), &key).await;
    let b = shop.post_with_key("/qr/mint", body, &key).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["data"], b.body["data"]);
    assert_eq!(b.body["meta"]["idempotency_replayed"], true);
    assert_eq!(a.body["data"]["expires_in"], 300);
    let code = a.body["data"]["short_code"].as_str().unwrap();
    assert_eq!(code.len(), 5);
    assert!(code.chars().all(|ch| ch.is_ascii_alphanumeric()));
    assert_eq!(shop.balance(&c).await["actual_minor"], 990);
}

#[tokio::test]
async fn a_short_code_pays_once_and_a_malformed_or_unknown_one_is_refused() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let code = shop.short_code(&c).await;

    let bad = shop
        .pay_with(json!({"type": "short_code", "short_code": "AB"}), 100)
        .await;
    assert_eq!(bad.code(), "VALIDATION_ERROR");
    assert!(
        bad.field_issues()
            .iter()
            .any(|(f, _)| f == "/credential/short_code"),
        "{}",
        bad.body
    );

    let r = shop
        .pay_with(
            json!({"type": "short_code", "short_code": code.to_lowercase()}),
            100,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .pay_with(json!({"type": "short_code", "short_code": code}), 100)
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED");
}

#[tokio::test]
async fn otp_payment_checks_order_amount_and_code_and_consumes_the_session_with_the_debit() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;

    let r = send_otp(&shop, &c, 250, "ORD-1").await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["otp_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!r.body.to_string().contains("otp_code"));
    let code = otp_code(&shop, &c, "ORD-1").await;
    assert_eq!(code.len(), 6);
    let wrong = if code == "000000" { "111111" } else { "000000" };

    // Order, amount and currency are bound to the session.
    let r = pay_otp(&shop, otp(&c, &code, &session), 250, "ORD-2").await;
    assert_eq!((r.status, r.code()), (400, "OTP_INVALID"), "{}", r.body);
    let r = pay_otp(&shop, otp(&c, &code, &session), 251, "ORD-1").await;
    assert_eq!((r.status, r.code()), (400, "OTP_INVALID"), "{}", r.body);

    // A wrong code counts; the session stays usable until the third.
    let r = pay_otp(&shop, otp(&c, wrong, &session), 250, "ORD-1").await;
    assert_eq!((r.status, r.code()), (400, "OTP_INVALID"), "{}", r.body);
    assert_eq!(r.body["error"]["details"]["attempts_remaining"], 2);

    // The right code from another customer's phone is a wrong attempt too.
    let stranger = shop.customer().await;
    let r = pay_otp(&shop, otp(&stranger, &code, &session), 250, "ORD-1").await;
    assert_eq!((r.status, r.code()), (400, "OTP_INVALID"), "{}", r.body);
    assert_eq!(r.body["error"]["details"]["attempts_remaining"], 1);

    // context.partner_session_id stands in for a missing order_ref.
    let mut body = shop.body(
        json!({"credential": otp(&c, &code, &session), "amount_minor": 250, "currency": "EUR"}),
    );
    body["context"]["partner_session_id"] = json!("ORD-1");
    let r = shop.post_body("/payments", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["order_ref"], "ORD-1");
    assert_eq!(r.body["data"]["balance_after"]["actual_minor"], 750);

    let r = pay_otp(&shop, otp(&c, &code, &session), 250, "ORD-1").await;
    assert_eq!(
        (r.status, r.code()),
        (400, "OTP_EXPIRED"),
        "a used session never pays twice: {}",
        r.body
    );
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn an_otp_payment_retried_after_its_response_copies_expired_is_replayed_not_refused() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let (session, code) = otp_for(&shop, &c, 250, "ORD-LATE").await;
    let key = Uuid::new_v4().to_string();
    let body = shop.body(
        json!({"credential": otp(&c, &code, &session), "amount_minor": 250,
        "currency": "EUR", "order_ref": "ORD-LATE"}),
    );
    let go = || {
        send(
            app.post("/payments")
                .bearer_auth(&shop.token)
                .header("Idempotency-Key", &key)
                .json(&body),
        )
    };
    let first = go().await;
    assert_eq!(first.status, 200, "{}", first.body);
    // Only the database record is left: the session is spent, yet the retry is the
    // payment's own response, not OTP_EXPIRED.
    drop_response_copies(&shop, &key).await;
    let late = go().await;
    assert_eq!(late.status, 200, "{}", late.body);
    assert_eq!(late.body["meta"]["idempotency_replayed"], true);
    assert_eq!(late.body["data"], first.body["data"]);
    assert_eq!(shop.balance(&c).await["actual_minor"], 750, "debited once");
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn three_wrong_otps_lock_the_session_and_sends_are_limited_to_three_per_order() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let (session, code) = otp_for(&shop, &c, 100, "ORD-L").await;
    let wrong = if code == "000000" { "111111" } else { "000000" };
    for left in [2, 1, 0] {
        let r = pay_otp(&shop, otp(&c, wrong, &session), 100, "ORD-L").await;
        assert_eq!(r.code(), "OTP_INVALID", "{}", r.body);
        assert_eq!(r.body["error"]["details"]["attempts_remaining"], left);
    }
    let r = pay_otp(&shop, otp(&c, &code, &session), 100, "ORD-L").await;
    assert_eq!(
        (r.status, r.code()),
        (429, "RATE_LIMITED"),
        "locked: {}",
        r.body
    );
    assert!(r.headers.get("retry-after").is_some());
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);

    // Two more sends for this order are allowed (three in all), the fourth is limited.
    for _ in 0..2 {
        assert_eq!(send_otp(&shop, &c, 100, "ORD-L").await.status, 200);
    }
    let r = send_otp(&shop, &c, 100, "ORD-L").await;
    r.assert_envelope();
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=300).contains(&retry), "{retry}");
    assert_eq!(
        send_otp(&shop, &c, 100, "ORD-OTHER").await.status,
        200,
        "per order"
    );
    // Across orders, one wallet gets at most WALLET_OTP_SENDS_PER_WALLET (10) per window.
    for i in 0..6 {
        assert_eq!(
            send_otp(&shop, &c, 100, &format!("ORD-X{i}")).await.status,
            200
        );
    }
    let r = send_otp(&shop, &c, 100, "ORD-Y").await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    app.stop().await;
}

#[tokio::test]
async fn otp_send_for_an_unknown_phone_is_not_found_and_moves_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let r = shop
        .post(
            "/payments/otp/send",
            json!({"phone": tests::shop::random_phone(), "amount_minor": 10, "currency": "EUR", "order_ref": "X"}),
        )
        .await;
    r.assert_envelope();
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
}

#[tokio::test]
async fn guessing_short_codes_is_rate_limited_per_integration() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let real = shop.short_code(&c).await;
    let mut limited = false;
    for i in 0..30 {
        let guess = format!("ZZ{:03}", i);
        if guess == real {
            continue;
        }
        let r = shop
            .pay_with(json!({"type": "short_code", "short_code": guess}), 10)
            .await;
        if r.code() == "RATE_LIMITED" {
            assert!(r.headers.get("retry-after").is_some());
            limited = true;
            break;
        }
        assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body);
    }
    assert!(limited, "guessing is cut off");
    let r = shop
        .pay_with(json!({"type": "short_code", "short_code": real}), 10)
        .await;
    assert_eq!(
        r.code(),
        "RATE_LIMITED",
        "even a right code waits while limited: {}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 500);
}
