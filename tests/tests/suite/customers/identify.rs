//! Identifying a customer: read-only, by any enabled credential, rate limited per
//! integration, and never a token.
use super::{sessions::open_session, *};
use serde_json::{Value, json};
use tests::{
    TestApp, send,
    shop::{Customer, Shop, random_phone},
};
use uuid::Uuid;

#[tokio::test]
async fn identify_resolves_a_customer_read_only_and_never_returns_a_token() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_500).await;
    shop.grant(&c, 300, "RELEASED", 3600).await;
    let db = &app.server.state.db;
    let before = money_state(db, shop.merchant()).await;

    // The phone as a cashier types it: spaces and a 00 prefix normalise to E.164.
    let typed = format!("00{} {}", &c.phone[1..6], &c.phone[6..]);
    let r = identify(&shop, json!({"credential_type": "phone", "phone": typed})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["resolution_state"], "registered");
    assert_eq!(d["wallet_id"], c.wallet_id.as_str());
    assert_eq!(d["wallet_user_id"], c.wallet_user_id.as_str());
    assert_eq!(
        d["wallet_program_id"],
        shop.tenant.wallet_program_id.to_string()
    );
    assert_eq!(d["balance"]["actual_minor"], 1_500);
    assert_eq!(d["balance"]["promo_available_minor"], 300);
    assert_eq!(d["badge"], "NEW");
    assert!(d["identity_trace_id"].as_str().is_some());
    assert!(!d["display_name"].as_str().unwrap().contains(&c.phone[3..]));
    let text = r.body.to_string().to_lowercase();
    assert!(!text.contains("token"), "no token of any kind: {text}");
    assert!(r.headers.get("x-ratelimit-limit").is_some());

    // The x-api-key is the declared scheme; it answers the same, and needs no
    // Idempotency-Key.
    let r = send(
        app.post("/identify")
            .header("x-api-key", &shop.tenant.platform_key)
            .json(&shop.body(json!({"credential": by_phone(&c)}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["wallet_id"], c.wallet_id.as_str());

    assert_eq!(money_state(db, shop.merchant()).await, before);
    let seen = events_of(db, shop.merchant(), "customer.identified").await;
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0]["wallet_id"], c.wallet_id.as_str());
    assert_eq!(seen[0]["credential_type"], "phone");
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn an_unknown_customer_is_not_found_with_http_200_and_no_event() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let r = identify(
        &shop,
        json!({"credential_type": "phone", "phone": random_phone()}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["resolution_state"], "not_found");
    assert_eq!(r.body["data"]["balance"], Value::Null);
    assert_eq!(r.body["data"]["wallet_id"], Value::Null);
    let db = &app.server.state.db;
    assert!(
        events_of(db, shop.merchant(), "customer.identified")
            .await
            .is_empty()
    );

    // Another tenant's customer looks exactly the same.
    let other = Shop::open(&app).await;
    let theirs = other.customer().await;
    let r = identify(&shop, by_phone(&theirs)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"]["resolution_state"], "not_found");
    assert_eq!(r.body["data"]["balance"], Value::Null);
}

#[tokio::test]
async fn a_pending_proof_customer_identifies_as_pending_proof() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer_in("PENDING_PROOF").await;
    let r = identify(&shop, by_phone(&c)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["resolution_state"], "pending_proof");
    assert_eq!(r.body["data"]["badge"], "PENDING_PROOF");
    assert_eq!(r.body["data"]["balance"]["actual_minor"], 0);
}

#[tokio::test]
async fn every_identity_credential_type_resolves_and_a_disabled_one_is_unsupported() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    // Enroll with a provider customer id and a card fingerprint, then verify by link.
    let phone = random_phone();
    let provider_id = format!("pos-{}", Uuid::new_v4().simple());
    let card = format!("fp_{}", Uuid::new_v4().simple());
    let r = shop
        .post(
            "/enroll/initiate",
            json!({"phone": phone, "provider_customer_id": provider_id, "card_fingerprint": card}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sms = shop.sms_after(&phone, "enrollment", 0).await;
    let r = shop
        .post(
            "/enroll/verify",
            json!({"verification_token": sms["verification_token"]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let wallet_user = r.body["data"]["wallet_user_id"]
        .as_str()
        .unwrap()
        .to_string();

    let mint = shop
        .post(
            "/qr/mint",
            json!({"customer": {"credential_type": "phone", "phone": phone}, "include_short_code": true}),
        )
        .await;
    assert_eq!(mint.status, 200, "{}", mint.body);
    let qr = mint.body["data"]["qr_payload"].as_str().unwrap();
    let code = mint.body["data"]["short_code"].as_str().unwrap();
    for credential in [
        json!({"credential_type": "phone", "phone": phone}),
        json!({"credential_type": "provider_customer_id", "provider_customer_id": provider_id}),
        json!({"credential_type": "card_fingerprint", "card_fingerprint": card}),
        json!({"credential_type": "qr", "qr_payload": qr}),
        json!({"credential_type": "short_code", "short_code": code.to_lowercase()}),
    ] {
        let r = identify(&shop, credential.clone()).await;
        assert_eq!(r.status, 200, "{credential}: {}", r.body);
        assert_eq!(
            r.body["data"]["wallet_user_id"], wallet_user,
            "{credential}: {}",
            r.body
        );
    }
    // Identification did not use up the QR nonce.
    shop.fund(
        &Customer {
            phone: phone.clone(),
            wallet_id: r.body["data"]["wallets"][0]["wallet_id"]
                .as_str()
                .unwrap()
                .into(),
            wallet_user_id: wallet_user.clone(),
        },
        100,
    )
    .await;
    let paid = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 100)
        .await;
    assert_eq!(paid.status, 200, "{}", paid.body);

    // An operator narrows the integration to phone only: capabilities say so, and every
    // other type is CREDENTIAL_TYPE_UNSUPPORTED with the supported list.
    let r = send(
        app.post(&format!(
            "/operator/integrations/{}/identify-credential-types",
            shop.tenant.integration_id
        ))
        .header("x-operator-key", &shop.operator_key)
        .json(&json!({"credential_types": ["phone"], "reason": "partner contract"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let caps = send(app.get("/capabilities").bearer_auth(&shop.token)).await;
    assert_eq!(
        caps.body["data"]["supported_identify_credential_types"],
        json!(["phone"])
    );
    let r = identify(
        &shop,
        json!({"credential_type": "provider_customer_id", "provider_customer_id": provider_id}),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "CREDENTIAL_TYPE_UNSUPPORTED"),
        "{}",
        r.body
    );
    assert!(r.body["error"]["details"].to_string().contains("phone"));
    let r = identify(&shop, json!({"credential_type": "retina", "retina": "x"})).await;
    assert_eq!((r.status, r.code()), (422, "CREDENTIAL_TYPE_UNSUPPORTED"));
    app.stop().await;
}

#[tokio::test]
async fn bad_identify_input_is_a_validation_error_naming_the_field() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    for (credential, field) in [
        (
            json!({"credential_type": "phone", "phone": "12345"}),
            "/credential/phone",
        ),
        (json!({"credential_type": "phone"}), "/credential/phone"),
        (
            json!({"phone": "+4915112345678"}),
            "/credential/credential_type",
        ),
        (
            json!({"credential_type": "short_code", "short_code": "AB"}),
            "/credential/short_code",
        ),
        (
            json!({"credential_type": "qr", "qr_payload": "http://evil"}),
            "/credential/qr_payload",
        ),
        (json!("+4915112345678"), "/credential"),
    ] {
        let r = identify(&shop, credential.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{credential}"
        );
        assert!(
            r.field_issues().iter().any(|(f, _)| f == field),
            "{credential}: {:?}",
            r.field_issues()
        );
    }
    let r = send(
        app.post("/identify")
            .bearer_auth(&shop.token)
            .header("Idempotency-Key", "not-a-uuid")
            .json(&shop.body(
                json!({"credential": {"credential_type": "phone", "phone": random_phone()}}),
            )),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"));
}

#[tokio::test]
async fn identify_of_a_customer_in_several_programs_needs_the_program() {
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
    let r = identify(&shop, by_phone(&c)).await;
    assert_eq!(
        (r.status, r.code()),
        (422, "WALLET_PROGRAM_AMBIGUOUS"),
        "{}",
        r.body
    );
    assert_eq!(
        r.body["error"]["details"]["candidates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let r = shop
        .post(
            "/identify",
            json!({"credential": by_phone(&c), "wallet_program_id": second.to_string()}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["wallet_program_id"], second.to_string());
}

#[tokio::test]
async fn identify_is_rate_limited_per_integration_with_retry_after() {
    let app = TestApp::spawn_with(false, |cfg| {
        cfg.rate_limit = 3;
        cfg.rate_limit_sandbox = 3;
    })
    .await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    for _ in 0..3 {
        assert_eq!(identify(&shop, by_phone(&c)).await.status, 200);
    }
    let r = identify(&shop, by_phone(&c)).await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    assert!(r.headers.get("retry-after").is_some());
    assert_eq!(r.headers.get("x-ratelimit-remaining").unwrap(), "0");
    // Another integration has its own budget.
    let other = Shop::open(&app).await;
    let theirs = other.customer().await;
    assert_eq!(identify(&other, by_phone(&theirs)).await.status, 200);
}

#[tokio::test]
async fn the_cashier_lookup_shows_identity_balance_activity_and_badge() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 2_000).await;
    shop.grant(&c, 500, "RELEASED", 3600).await;
    let paid = shop.pay(&c, 700).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let r = send(
        app.get(&format!(
            "/customers/lookup?phone={}",
            c.phone.replace('+', "%2B")
        ))
        .bearer_auth(&shop.token),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["customer"]["resolution_state"], "registered");
    assert_eq!(d["customer"]["badge"], "MEMBER");
    assert_eq!(d["identity_state"], "VERIFIED");
    assert_eq!(d["customer"]["balance"]["actual_minor"], 1_800);
    assert_eq!(d["customer"]["balance"]["promo_available_minor"], 0);
    assert_eq!(
        d["recent_payments"][0]["payment_id"],
        paid.body["data"]["payment_id"]
    );
    let kinds: Vec<&str> = d["recent_activity"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["payment", "grant_accrual", "adjustment"]);
    assert_eq!(d["recent_activity"][0]["actual_delta_minor"], -200);
    assert_eq!(d["recent_activity"][0]["promo_delta_minor"], -500);
    assert_eq!(d["grants"][0]["state"], "CONSUMED");

    // Unknown: 200 with not_found. Another tenant's customer: the same.
    let other = Shop::open(&app).await;
    let theirs = other.customer().await;
    for phone in [random_phone(), theirs.phone.clone()] {
        let r = send(
            app.get(&format!(
                "/customers/lookup?phone={}",
                phone.replace('+', "%2B")
            ))
            .bearer_auth(&shop.token),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["customer"]["resolution_state"], "not_found");
        assert_eq!(r.body["data"]["recent_payments"], json!([]));
    }
    // Exactly one credential.
    let r = send(app.get("/customers/lookup").bearer_auth(&shop.token)).await;
    assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"));
}

#[tokio::test]
async fn lookup_and_session_identify_share_the_identify_rate_limit() {
    let app = TestApp::spawn_with(false, |cfg| {
        cfg.rate_limit = 4;
        cfg.rate_limit_sandbox = 4;
    })
    .await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let lookup = || {
        send(
            app.get(&format!(
                "/customers/lookup?phone={}",
                c.phone.replace('+', "%2B")
            ))
            .bearer_auth(&shop.token),
        )
    };
    assert_eq!(lookup().await.status, 200);
    assert_eq!(identify(&shop, by_phone(&c)).await.status, 200);
    let id = open_session(&shop).await;
    let path = format!("/checkout/sessions/{id}/identify");
    assert_eq!(
        shop.post(&path, json!({"customer": by_phone(&c)}))
            .await
            .status,
        200
    );
    assert_eq!(lookup().await.status, 200);
    for r in [
        lookup().await,
        identify(&shop, by_phone(&c)).await,
        shop.post(&path, json!({"customer": by_phone(&c)})).await,
    ] {
        assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
        assert!(r.headers.get("retry-after").is_some());
    }
}

#[tokio::test]
async fn guessing_short_codes_by_identification_counts_like_guessing_at_payment_for_its_terminal() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let mint = shop
        .post(
            "/qr/mint",
            json!({"customer": by_phone(&c), "include_short_code": true}),
        )
        .await;
    let code = mint.body["data"]["short_code"]
        .as_str()
        .unwrap()
        .to_string();
    let miss = if code == "22222" { "33333" } else { "22222" };
    for _ in 0..app.server.state.config.risk_terminal_failures {
        let r = send(
            app.get(&format!("/customers/lookup?short_code={miss}"))
                .bearer_auth(&shop.token),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["customer"]["resolution_state"], "not_found");
    }
    // Now identification by short code is refused, and so is paying with one: even the
    // right code, until the window passes.
    let r = identify(
        &shop,
        json!({"credential_type": "short_code", "short_code": code}),
    )
    .await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    let r = shop
        .pay_with(json!({"type": "short_code", "short_code": code}), 100)
        .await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);
}

/// The Idempotency-Key is optional on identify; sent, "same Idempotency-Key and same payload
/// replays the original result byte-identically": the balance the till saw first, one
/// customer.identified event, and no second guess counted.
#[tokio::test]
async fn identify_retried_with_its_key_replays_the_first_answer_and_emits_one_event() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 700).await;
    let db = &app.server.state.db;
    let key = Uuid::new_v4().to_string();
    let body = shop.body(json!({"credential": by_phone(&c)}));
    let ask = || {
        send(
            app.post("/identify")
                .bearer_auth(&shop.token)
                .header("Idempotency-Key", &key)
                .json(&body),
        )
    };

    let first = ask().await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["data"]["balance"]["actual_minor"], 700);
    shop.fund(&c, 300).await;
    let retry = ask().await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(retry.body["meta"]["idempotency_replayed"], true);
    assert_eq!(retry.body["data"], first.body["data"], "the first answer");
    assert_eq!(
        events_of(db, shop.merchant(), "customer.identified")
            .await
            .len(),
        1
    );

    let fresh = identify(&shop, by_phone(&c)).await;
    assert_eq!(fresh.body["data"]["balance"]["actual_minor"], 1_000);
    assert_eq!(fresh.body["meta"]["idempotency_replayed"], false);
}
