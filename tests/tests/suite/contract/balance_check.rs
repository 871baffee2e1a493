//! The redeem balance check (spec "Identity": "The Idempotency-Key header is also optional on
//! the redeem balance check ... (read-shaped POSTs)"): what a wallet can spend now for an
//! amount and a credential, consuming nothing.
use serde_json::{Value, json};
use tests::{TestApp, shop::Shop};

async fn check(shop: &Shop<'_>, credential: Value, amount: i64) -> tests::Reply {
    shop.post(
        "/redeem/balance-check",
        json!({"credential": credential, "amount_minor": amount, "currency": "EUR"}),
    )
    .await
}

/// It answers whether the payment would go through and how it would split (promotional
/// credit first), and the credential still pays afterwards: nothing was consumed.
#[tokio::test]
async fn a_balance_check_splits_the_amount_and_consumes_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.grant(&c, 300, "RELEASED", 3_600).await;
    let qr = shop.qr(&c).await;
    let credential = json!({"type": "qr", "qr_payload": qr});

    let r = check(&shop, credential.clone(), 500).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["can_pay"], true);
    assert!(d["reason"].is_null());
    assert_eq!(d["wallet_id"], c.wallet_id.as_str());
    assert_eq!(d["spendable_minor"], 1_300);
    assert_eq!(d["would_debit_promo_minor"], 300);
    assert_eq!(d["would_debit_actual_minor"], 200);
    assert_eq!(d["shortfall_minor"], 0);
    assert_eq!(d["balance"]["actual_minor"], 1_000);

    // Too much: 200 with the shortfall, not the payment's 402.
    let r = check(&shop, credential.clone(), 2_000).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["can_pay"], false);
    assert_eq!(r.body["data"]["reason"], "insufficient_funds");
    assert_eq!(r.body["data"]["shortfall_minor"], 700);

    // The same nonce still pays, exactly as checked.
    let paid = shop.pay_with(credential.clone(), 500).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.body["data"]["debited_promo_minor"], 300);
    assert_eq!(paid.body["data"]["debited_actual_minor"], 200);

    // Used now: the check answers what the payment would.
    let r = check(&shop, credential, 100).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
        "{}",
        r.body
    );
    shop.assert_ledger_consistent().await;
}

/// An OTP credential needs only its session: the code is never verified, so the check can
/// neither guess codes nor use up the session's three attempts.
#[tokio::test]
async fn an_otp_balance_check_reads_the_session_without_touching_its_attempts() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 800).await;
    let sent = shop
        .post(
            "/payments/otp/send",
            json!({"phone": c.phone, "amount_minor": 600, "currency": "EUR", "order_ref": "R-1"}),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    let session = sent.body["data"]["otp_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..4 {
        let r = check(
            &shop,
            json!({"type": "otp", "otp_session_id": session, "otp_code": "000000"}),
            600,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["can_pay"], true);
    }
    // Another amount than the session was sent for fails as the payment would.
    let r = check(
        &shop,
        json!({"type": "otp", "otp_session_id": session}),
        601,
    )
    .await;
    assert_eq!((r.status, r.code()), (400, "OTP_INVALID"), "{}", r.body);
    // The session was not locked by the wrong codes above: the real one pays.
    let sms = shop.sms_after(&c.phone, "otp", 0).await;
    let code = sms["code"].as_str().unwrap_or_default().to_string();
    let paid = shop
        .pay_with(
            json!({"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session}),
            600,
        )
        .await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    drop(shop);
    app.stop().await;
}

/// The payment's rules hold for the check: a static identifier is
/// REQUIRES_DYNAMIC_CREDENTIAL, a pending-proof customer cannot pay, bad input names its
/// field, and an Idempotency-Key is optional.
#[tokio::test]
async fn a_balance_check_follows_the_payments_rules() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let r = check(&shop, json!({"type": "phone", "phone": c.phone}), 100).await;
    assert_eq!(
        (r.status, r.code()),
        (422, "REQUIRES_DYNAMIC_CREDENTIAL"),
        "{}",
        r.body
    );

    let pending = shop.customer_in("PENDING_PROOF").await;
    shop.fund(&pending, 500).await;
    let qr = shop.qr(&pending).await;
    let r = check(&shop, json!({"type": "qr", "qr_payload": qr}), 100).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["can_pay"], false);
    assert_eq!(r.body["data"]["reason"], "pending_proof");
    assert_eq!(r.body["data"]["customer_state"], "PENDING_PROOF");

    let r = check(&shop, json!({"type": "qr", "qr_payload": qr}), 0).await;
    r.assert_field_error("/amount_minor");

    let body = shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"}));
    let r = tests::send(
        app.post("/redeem/balance-check")
            .bearer_auth(&shop.token)
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "no Idempotency-Key is needed: {}", r.body);
}
