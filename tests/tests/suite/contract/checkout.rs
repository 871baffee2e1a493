//! QR mint from the checkout session, and a replayed nonce of a completed session.
use serde_json::{Value, json};
use tests::{Reply, TestApp, send, shop::Shop};
use uuid::Uuid;

/// A terminal token of a key scoped to one of the tenant's branches.
async fn branch_token(shop: &Shop<'_>, branch: Uuid) -> String {
    let t = &shop.tenant;
    let r = shop
        .control(
            "/auth/keys",
            json!({"enterprise_id": t.merchant_id.to_string(), "brand_id": t.brand_id.to_string(),
                   "branch_id": branch.to_string(), "label": "till"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let key = r.body["data"]["raw_key"].as_str().unwrap().to_string();
    let mut body = shop.body(json!({}));
    body["context"]["branch_id"] = json!(branch.to_string());
    let r = send(
        shop.app
            .post("/auth/token")
            .header("x-api-key", &key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["token"].as_str().unwrap().to_string()
}

/// POST `path` as the terminal holding `token`, in `branch`, with `extra` in the body.
async fn as_terminal(
    shop: &Shop<'_>,
    token: &str,
    branch: Uuid,
    path: &str,
    extra: Value,
) -> Reply {
    let mut body = shop.body(extra);
    body["context"]["branch_id"] = json!(branch.to_string());
    send(
        shop.app
            .post(path)
            .bearer_auth(token)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await
}

/// "POST /qr/mint: meta and context plus two optional inputs": the customer is the one
/// the cashier identified in the checkout session (`context.service_session_id`); the
/// short code is off unless asked for. A session not yet IDENTIFIED, of another branch or
/// of another tenant never yields a QR.
#[tokio::test]
async fn a_qr_is_minted_for_the_customer_identified_in_the_checkout_session() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let branch = shop.tenant.branch_ids[0];
    let till = branch_token(&shop, branch).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let r = as_terminal(&shop, &till, branch, "/checkout/sessions", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let in_session = json!({"context": {"service_session_id": session}});

    // Nobody identified yet: no QR, and the field says why.
    let r = as_terminal(&shop, &till, branch, "/qr/mint", in_session.clone()).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert!(
        r.field_issues()
            .iter()
            .any(|(f, i)| f == "/context/service_session_id" && i == "session_not_identified"),
        "{}",
        r.body
    );

    let r = as_terminal(
        &shop,
        &till,
        branch,
        &format!("/checkout/sessions/{session}/identify"),
        json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Another branch's terminal, another tenant's terminal, a session that exists nowhere.
    let other_branch = shop.tenant.branch_ids[1];
    let other_till = branch_token(&shop, other_branch).await;
    let r = as_terminal(
        &shop,
        &other_till,
        other_branch,
        "/qr/mint",
        in_session.clone(),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    let stranger = Shop::open(&app).await;
    let r = stranger
        .post(
            "/qr/mint",
            json!({"context": {"service_session_id": session}}),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    let r = shop
        .post(
            "/qr/mint",
            json!({"context": {"service_session_id": Uuid::now_v7().to_string()}}),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    // A customer named beside the session must be the session's.
    let someone_else = shop.customer().await;
    let mut named = in_session.clone();
    named["wallet_user_id"] = json!(someone_else.wallet_user_id);
    let r = as_terminal(&shop, &till, branch, "/qr/mint", named).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );

    // The spec's request: meta, context, nothing else. No short code unless asked for.
    let minted = as_terminal(&shop, &till, branch, "/qr/mint", in_session.clone()).await;
    assert_eq!(minted.status, 200, "{}", minted.body);
    assert_eq!(minted.body["data"]["short_code"], Value::Null);
    let qr = minted.body["data"]["qr_payload"]
        .as_str()
        .unwrap()
        .to_string();
    let mut with_code = in_session.clone();
    with_code["include_short_code"] = json!(true);
    let r = as_terminal(&shop, &till, branch, "/qr/mint", with_code).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["short_code"].as_str().unwrap().len(), 5);
    // That second mint replaced the first nonce; mint again and pay in the session.
    let _ = qr;
    let minted = as_terminal(&shop, &till, branch, "/qr/mint", in_session.clone()).await;
    let qr = minted.body["data"]["qr_payload"]
        .as_str()
        .unwrap()
        .to_string();
    let mut pay = in_session.clone();
    pay["credential"] = json!({"type": "qr", "qr_payload": qr});
    pay["amount_minor"] = json!(250);
    pay["currency"] = json!("EUR");
    let r = as_terminal(&shop, &till, branch, "/payments", pay).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["wallet_id"], c.wallet_id.as_str());
    assert_eq!(shop.balance(&c).await["actual_minor"], 750);

    // Neither a session nor a customer: the field to give.
    let r = shop.post("/qr/mint", json!({})).await;
    r.assert_field_error("/context/service_session_id");
}

/// "A used or expired QR nonce returns CREDENTIAL_EXPIRED_OR_REPLAYED" even when its
/// checkout session completed: the credential is checked first, and its code tells the
/// cashier what to do (mint a new nonce). Covered with the session's other rules in
/// `customers::a_session_opens_gets_identified_and_is_completed_by_its_payment`.
#[tokio::test]
async fn a_replayed_nonce_of_a_completed_session_is_credential_expired_or_replayed() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let r = shop.post("/checkout/sessions", json!({})).await;
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let r = shop
        .post(
            &format!("/checkout/sessions/{session}/identify"),
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post(
            "/qr/mint",
            json!({"context": {"service_session_id": session}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let qr = r.body["data"]["qr_payload"].as_str().unwrap().to_string();
    let pay = json!({"context": {"service_session_id": session},
                     "credential": {"type": "qr", "qr_payload": qr},
                     "amount_minor": 100, "currency": "EUR"});
    let r = shop.post("/payments", pay.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop.post("/payments", pay).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
        "{}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
}
