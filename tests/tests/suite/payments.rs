//! Wallet payments, as the spec's "Payments" rules state them.
use std::time::Duration;

use serde_json::{Value, json};
use tests::{
    TestApp, eventually, send,
    shop::{Customer, Shop},
};
use uuid::Uuid;

/// The code of the newest OTP SMS for the customer whose body names `order_ref`.
async fn otp_code(shop: &Shop<'_>, c: &Customer, order_ref: &str) -> String {
    let url = format!(
        "/sandbox/messages?phone={}&limit=200",
        c.phone.replace('+', "%2B")
    );
    eventually(Duration::from_secs(20), "the OTP SMS", || async {
        let r = send(
            shop.app
                .get(&url)
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        r.body["data"].as_array().and_then(|msgs| {
            msgs.iter()
                .find(|m| {
                    m["kind"] == "otp"
                        && m["body"]
                            .as_str()
                            .unwrap_or("")
                            .contains(&format!("order {order_ref}."))
                })
                .and_then(|m| m["code"].as_str().map(str::to_string))
        })
    })
    .await
}

async fn send_otp(shop: &Shop<'_>, c: &Customer, amount: i64, order_ref: &str) -> tests::Reply {
    shop.post(
        "/payments/otp/send",
        json!({"phone": c.phone, "amount_minor": amount, "currency": "EUR", "order_ref": order_ref}),
    )
    .await
}

fn otp(c: &Customer, code: &str, session: &str) -> Value {
    json!({"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session})
}

async fn pay_otp(shop: &Shop<'_>, cred: Value, amount: i64, order_ref: &str) -> tests::Reply {
    shop.post(
        "/payments",
        json!({"credential": cred, "amount_minor": amount, "currency": "EUR", "order_ref": order_ref}),
    )
    .await
}

/// An OTP sent for `order_ref`: its session id and the code the sandbox inbox got.
async fn otp_for(shop: &Shop<'_>, c: &Customer, amount: i64, order_ref: &str) -> (String, String) {
    let r = send_otp(shop, c, amount, order_ref).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["otp_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    (session, otp_code(shop, c, order_ref).await)
}

/// Drops the short-lived copies of a terminal's response under `key` (Redis in production,
/// in process in embedded mode), as their expiry would: only the database record is left.
async fn drop_response_copies(shop: &Shop<'_>, key: &str) {
    let state = &shop.app.server.state;
    state
        .kv
        .del(&[format!("idem:resp:{}:{key}", shop.tenant.integration_id)])
        .await
        .unwrap();
    state.recent_responses.clear();
}

#[tokio::test]
async fn released_promo_pays_first_earliest_expiry_first_then_actual_and_locked_never_pays() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let late = shop.grant(&c, 300, "RELEASED", 172_800).await;
    let soon = shop.grant(&c, 200, "RELEASED", 86_400).await;
    shop.grant(&c, 500, "LOCKED", 3_600).await;

    let r = shop.pay(&c, 600).await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["status"], "completed");
    assert_eq!(d["amount_minor"], 600);
    assert_eq!(d["debited_promo_minor"], 500);
    assert_eq!(d["debited_actual_minor"], 100);
    assert_eq!(d["currency"], "EUR");
    assert_eq!(d["wallet_id"], c.wallet_id.as_str());
    let after = &d["balance_after"];
    assert_eq!(after["actual_minor"], 900);
    assert_eq!(after["promo_available_minor"], 0);
    assert_eq!(after["promo_locked_minor"], 500);
    let text = r.body.to_string();
    for forbidden in ["token", "authorization"] {
        assert!(
            !text.contains(forbidden),
            "no debit or authorization token: {text}"
        );
    }

    // The soon-expiring grant went first: with 250 of promo left in the other order, it
    // would show. Both are spent here; check the split on a smaller payment.
    let c2 = shop.customer().await;
    shop.fund(&c2, 100).await;
    let g_late = shop.grant(&c2, 300, "RELEASED", 172_800).await;
    let g_soon = shop.grant(&c2, 200, "RELEASED", 86_400).await;
    let r = shop.pay(&c2, 250).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let grants = r.body["data"]["balance_after"]["promo_grants"]
        .as_array()
        .unwrap()
        .clone();
    let left = |id: &str| {
        grants
            .iter()
            .find(|g| g["grant_id"] == id)
            .map(|g| g["remaining_minor"].clone())
    };
    assert_eq!(
        left(&g_soon),
        None,
        "the earliest-expiring grant is used up first"
    );
    assert_eq!(left(&g_late), Some(json!(250)));
    assert_eq!(r.body["data"]["balance_after"]["actual_minor"], 100);
    let _ = (late, soon);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn insufficient_funds_gives_the_details_moves_nothing_and_leaves_the_credential_usable() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100).await;
    shop.grant(&c, 50, "RELEASED", 3_600).await;
    shop.grant(&c, 70, "LOCKED", 3_600).await;
    let qr = shop.qr(&c).await;

    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 200)
        .await;
    r.assert_envelope();
    assert_eq!(r.status, 402, "{}", r.body);
    assert_eq!(r.code(), "INSUFFICIENT_FUNDS");
    let d = &r.body["error"]["details"];
    assert_eq!(d["shortfall_minor"], 50);
    assert_eq!(d["available_actual_minor"], 100);
    assert_eq!(d["available_promo_minor"], 50);
    assert_eq!(d["currency"], "EUR");
    assert_eq!(shop.balance(&c).await["actual_minor"], 100);

    shop.fund(&c, 50).await;
    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 200)
        .await;
    assert_eq!(r.status, 200, "the same QR still pays: {}", r.body);
    shop.assert_ledger_consistent().await;
}

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
async fn a_retry_with_the_same_key_replays_byte_for_byte_and_never_debits_twice() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let key = Uuid::new_v4().to_string();
    let body = shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 400, "currency": "EUR"}));
    let go = |b: Value| {
        send(
            app.post("/payments")
                .bearer_auth(&shop.token)
                .header("Idempotency-Key", &key)
                .json(&b),
        )
    };
    let first = go(body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let again = go(body.clone()).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    let restored = String::from_utf8(again.bytes.clone()).unwrap().replace(
        "\"idempotency_replayed\":true",
        "\"idempotency_replayed\":false",
    );
    assert_eq!(restored.as_bytes(), first.bytes.as_slice(), "byte for byte");
    assert_eq!(shop.balance(&c).await["actual_minor"], 600);

    // Past the copies' lifetime (Redis, or in process in embedded mode) only the database
    // record is left: still the same bytes, still one debit.
    drop_response_copies(&shop, &key).await;
    let late = go(body.clone()).await;
    assert_eq!(late.bytes, again.bytes, "{}", late.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 600);

    let mut changed = body;
    changed["amount_minor"] = json!(401);
    let r = go(changed).await;
    assert_eq!(
        (r.status, r.code()),
        (422, "IDEMPOTENCY_KEY_REUSED"),
        "{}",
        r.body
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_pending_proof_wallet_cannot_pay() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer_in("PENDING_PROOF").await;
    shop.fund(&c, 500).await;
    let r = shop.pay(&c, 100).await;
    r.assert_envelope();
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 500);
}

#[tokio::test]
async fn another_merchant_or_tenant_cannot_use_or_see_a_customers_credential_or_payment() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let qr = shop.qr(&c).await;

    // A token for one merchant naming another merchant in context.
    let mut body = shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 10, "currency": "EUR"}));
    body["context"]["merchant_id"] = json!(other.merchant().to_string());
    let r = shop.post_body("/payments", &body).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);

    // The other tenant's terminal presenting this customer's QR: as if it did not exist.
    let r = other
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 10)
        .await;
    assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body);
    let r = other
        .post("/qr/mint", json!({"wallet_user_id": c.wallet_user_id}))
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);

    let paid = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 10)
        .await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let id = paid.body["data"]["payment_id"].as_str().unwrap();
    let mine = send(app.get(&format!("/payments/{id}")).bearer_auth(&shop.token)).await;
    assert_eq!(mine.status, 200, "{}", mine.body);
    let theirs = send(
        app.get(&format!("/payments/{id}"))
            .bearer_auth(&other.token),
    )
    .await;
    let unknown = send(
        app.get(&format!("/payments/{}", Uuid::now_v7()))
            .bearer_auth(&other.token),
    )
    .await;
    assert_eq!((theirs.status, theirs.code()), (404, "NOT_FOUND"));
    assert_eq!(
        theirs.body["error"], unknown.body["error"],
        "no difference between foreign and unknown"
    );
    let r = other
        .post(&format!("/payments/{id}/refund"), json!({}))
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 490);
}

#[tokio::test]
async fn unknown_or_disabled_credential_types_and_currencies_are_refused_with_the_supported_list() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    for cred in [
        json!({"type": "card", "pan": "4111"}),
        json!({"type": "pass_tap", "pass_serial": "p", "tap_payload": "x"}),
    ] {
        let r = shop.pay_with(cred, 10).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (422, "CREDENTIAL_TYPE_UNSUPPORTED"),
            "{}",
            r.body
        );
        assert_eq!(
            r.body["error"]["details"]["supported"],
            json!(["otp", "qr", "short_code"])
        );
    }
    let caps = send(
        app.get("/capabilities")
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(
        caps.body["data"]["supported_payment_credential_types"],
        json!(["otp", "qr", "short_code"])
    );

    let c = shop.customer().await;
    let qr = shop.qr(&c).await;
    let r = shop
        .post("/payments", json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 10, "currency": "USD"}))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "CURRENCY_NOT_SUPPORTED"),
        "{}",
        r.body
    );
    assert_eq!(r.body["error"]["details"]["supported"], json!(["EUR"]));

    for (body, field) in [
        (
            json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 0, "currency": "EUR"}),
            "/amount_minor",
        ),
        (
            json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 1.5, "currency": "EUR"}),
            "/amount_minor",
        ),
        (
            json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 5, "currency": "EU"}),
            "/currency",
        ),
        (
            json!({"credential": {"type": "otp", "phone": c.phone}, "amount_minor": 5, "currency": "EUR", "order_ref": "o"}),
            "/credential/otp_code",
        ),
        (json!({"amount_minor": 5, "currency": "EUR"}), "/credential"),
    ] {
        let r = shop.post("/payments", body.clone()).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{body}: {}",
            r.body
        );
        assert!(
            r.field_issues().iter().any(|(f, _)| f == field),
            "{field}: {}",
            r.body
        );
    }
    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 1)
        .await;
    assert_eq!(r.status, 402, "bad requests consumed nothing: {}", r.body);
}

#[tokio::test]
async fn a_customer_in_several_programs_must_name_one() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let second = Uuid::now_v7();
    api::store::tenancy::insert_wallet_program(
        &app.server.state.db,
        second,
        shop.merchant(),
        "Second program",
        "EUR",
    )
    .await
    .unwrap();
    let r = shop
        .operator(
            "/operator/wallets",
            json!({"merchant_id": shop.merchant().to_string(), "phone": c.phone, "wallet_program_id": second.to_string(), "reason": "second program"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let r = shop
        .post("/qr/mint", json!({"wallet_user_id": c.wallet_user_id}))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "WALLET_PROGRAM_AMBIGUOUS"),
        "{}",
        r.body
    );
    let mut candidates: Vec<String> =
        serde_json::from_value(r.body["error"]["details"]["candidates"].clone()).unwrap();
    candidates.sort();
    let mut expected = vec![
        shop.tenant.wallet_program_id.to_string(),
        second.to_string(),
    ];
    expected.sort();
    assert_eq!(candidates, expected);

    let r = shop
        .post(
            "/qr/mint",
            json!({"wallet_user_id": c.wallet_user_id, "wallet_program_id": second.to_string()}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["wallet_program_id"], second.to_string());
}

#[tokio::test]
async fn basket_lines_are_stored_never_change_the_debit_and_a_divergence_is_flagged() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let plain = shop.pay(&c, 100).await;
    let qr = shop.qr(&c).await;
    let r = shop
        .post(
            "/payments",
            json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 300, "currency": "EUR", "order_ref": "B-1",
                   "basket": {"lines": [
                       {"sku": "COFFEE", "quantity": 2, "unit_price_minor": 150, "extended_price_minor": 300, "category": "drinks"},
                       {"sku": "CAKE", "quantity": 1, "unit_price_minor": 250, "extended_price_minor": 250, "category": "food", "discount_minor": 50}
                   ]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["amount_minor"], 300);
    assert_eq!(
        r.body["data"]["debited_actual_minor"], 300,
        "the debit is amount_minor, not the basket"
    );
    assert_eq!(
        r.body["data"]["needs_reconciliation"], true,
        "basket totals 500"
    );
    let with = r.body["meta"]["data_completeness_score"].as_i64().unwrap();
    let without = plain.body["meta"]["data_completeness_score"]
        .as_i64()
        .unwrap();
    assert!(with > without, "{with} > {without}");
    assert_eq!(plain.body["data"]["needs_reconciliation"], false);

    let id = r.body["data"]["payment_id"].as_str().unwrap();
    let got = send(app.get(&format!("/payments/{id}")).bearer_auth(&shop.token)).await;
    assert_eq!(got.body["data"]["basket_total_minor"], 500);
    assert_eq!(got.body["data"]["needs_reconciliation"], true);
    assert_eq!(shop.balance(&c).await["actual_minor"], 600);
}

#[tokio::test]
async fn a_void_reverses_in_full_once_and_returns_promo_to_its_grant() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 400).await;
    let g = shop.grant(&c, 100, "RELEASED", 3_600).await;
    let paid = shop.pay(&c, 300).await;
    assert_eq!(paid.body["data"]["debited_promo_minor"], 100);
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();

    let r = shop
        .post(
            &format!("/payments/{id}/void"),
            json!({"reason": "wrong till"}),
        )
        .await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["payment"]["status"], "voided");
    assert_eq!(r.body["data"]["refund"]["returned_actual_minor"], 200);
    assert_eq!(r.body["data"]["refund"]["returned_promo_minor"], 100);
    let after = &r.body["data"]["balance_after"];
    assert_eq!(after["actual_minor"], 400);
    assert_eq!(after["promo_available_minor"], 100);
    assert_eq!(after["promo_grants"][0]["grant_id"], g.as_str());

    let again = shop.post(&format!("/payments/{id}/void"), json!({})).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(
        again.body["data"]["refund"].is_null(),
        "nothing reversed twice"
    );
    let refund = shop
        .post(&format!("/payments/{id}/refund"), json!({}))
        .await;
    assert_eq!(
        (refund.status, refund.code()),
        (409, "CONFLICT"),
        "{}",
        refund.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 400);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn refunds_return_part_or_all_but_never_more_than_was_paid() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 1_000).await;
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/payments/{id}/refund");
    let refund = |amount: Option<i64>| {
        let body = match amount {
            Some(a) => json!({"amount_minor": a, "currency": "EUR"}),
            None => json!({}),
        };
        shop.post(&path, body)
    };
    let r = refund(Some(300)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["payment"]["refunded_minor"], 300);
    assert_eq!(r.body["data"]["payment"]["status"], "completed");
    let r = refund(Some(701)).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    let r = refund(None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["refund"]["amount_minor"], 700);
    assert_eq!(r.body["data"]["payment"]["refundable_minor"], 0);
    let r = refund(Some(1)).await;
    assert_eq!(r.code(), "VALIDATION_ERROR");
    let void = shop.post(&format!("/payments/{id}/void"), json!({})).await;
    assert_eq!(
        void.code(),
        "VALIDATION_ERROR",
        "a refunded payment is not voided: {}",
        void.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);

    let got = send(app.get(&format!("/payments/{id}")).bearer_auth(&shop.token)).await;
    assert_eq!(got.body["data"]["refunds"].as_array().unwrap().len(), 2);
    let capture = shop
        .post(&format!("/payments/{id}/capture"), json!({}))
        .await;
    capture.assert_envelope();
    assert_eq!(
        (capture.status, capture.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        capture.body
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_refunded_promo_part_whose_grant_expired_is_forfeited_not_revived() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100).await;
    shop.grant(&c, 200, "RELEASED", 2).await;
    let paid = shop.pay(&c, 250).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.body["data"]["debited_promo_minor"], 200);
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let r = shop
        .post(&format!("/payments/{id}/refund"), json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["refund"]["returned_actual_minor"], 50);
    assert_eq!(r.body["data"]["refund"]["forfeited_promo_minor"], 200);
    assert_eq!(r.body["data"]["balance_after"]["actual_minor"], 100);
    assert_eq!(r.body["data"]["balance_after"]["promo_available_minor"], 0);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn every_money_change_writes_its_events_in_order_per_resource() {
    use entities::outbox;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 600).await;
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    shop.post(
        &format!("/payments/{id}/refund"),
        json!({"amount_minor": 100}),
    )
    .await;
    shop.post(
        &format!("/payments/{id}/refund"),
        json!({"amount_minor": 100}),
    )
    .await;
    let events = |rid: String| {
        let db = app.server.state.db.clone();
        async move {
            outbox::Entity::find()
                .filter(outbox::Column::ResourceId.eq(rid))
                .filter(outbox::Column::Kind.eq("event"))
                .order_by_asc(outbox::Column::Id)
                .all(&db)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.topic, e.sequence_number))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        events(id.clone()).await,
        vec![
            ("payment.completed".to_string(), 1),
            ("payment.refunded".to_string(), 2),
            ("payment.refunded".to_string(), 3)
        ]
    );
    let wallet: Vec<_> = events(c.wallet_id.clone()).await;
    assert_eq!(wallet.len(), 4, "fund, pay, two refunds: {wallet:?}");
    assert!(wallet.iter().all(|(t, _)| t == "wallet.balance_changed"));
    assert_eq!(
        wallet.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
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
