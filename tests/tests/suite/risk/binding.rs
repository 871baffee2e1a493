//! A QR payload or short code pays only at the merchant whose checkout minted it, and one
//! minted in a checkout session pays only in that session. Elsewhere it is refused exactly
//! as an unknown code is, and the refusal counts as a failed credential.
use serde_json::{Value, json};
use tests::{TestApp, send, shop::Shop};

async fn open_session(shop: &Shop<'_>) -> String {
    let r = shop.post("/checkout/sessions", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["session_id"].as_str().unwrap().to_string()
}

fn payment(shop: &Shop<'_>, credential: Value, session: Option<&str>) -> Value {
    let mut body =
        shop.body(json!({"credential": credential, "amount_minor": 10, "currency": "EUR"}));
    if let Some(s) = session {
        body["context"]["service_session_id"] = json!(s);
    }
    body
}

/// Merchants A and B of one platform: a code A minted never pays at B, and B hears what it
/// hears for a code nobody minted.
#[tokio::test]
async fn a_code_minted_at_one_merchant_never_pays_at_another_merchant_of_the_same_platform() {
    let app = TestApp::spawn().await;
    let a = Shop::open(&app).await;
    let b = a.sibling().await;
    assert_eq!(a.tenant.integration_id, b.tenant.integration_id);
    let c = a.customer().await;
    a.fund(&c, 1_000).await;
    let qr = a.qr(&c).await;
    let code = a.short_code(&c).await;
    let unknown = b
        .pay_with(json!({"type": "short_code", "short_code": "ZZZZ2"}), 10)
        .await;
    for credential in [
        json!({"type": "qr", "qr_payload": qr}),
        json!({"type": "short_code", "short_code": code}),
    ] {
        let r = b.pay_with(credential.clone(), 10).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
            "{}",
            r.body
        );
        assert_eq!(
            r.body["error"]["details"], unknown.body["error"]["details"],
            "nothing tells a foreign code from an unknown one"
        );
        let checked = b
            .post(
                "/redeem/balance-check",
                json!({"credential": credential, "amount_minor": 10, "currency": "EUR"}),
            )
            .await;
        assert_eq!(
            checked.code(),
            "CREDENTIAL_EXPIRED_OR_REPLAYED",
            "{}",
            checked.body
        );
    }
    assert_eq!(a.balance(&c).await["actual_minor"], 1_000);
    // At A they still pay.
    assert_eq!(
        a.pay_with(json!({"type": "short_code", "short_code": code}), 10)
            .await
            .status,
        200
    );
    a.assert_ledger_consistent().await;
}

/// A code minted in checkout session S pays in S and nowhere else: not outside a session,
/// not in another session of the same till. A code minted outside any session pays in any.
#[tokio::test]
async fn a_code_minted_in_a_checkout_session_pays_only_in_that_session() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let s = open_session(&shop).await;
    let other = open_session(&shop).await;
    let identified = shop
        .post(
            &format!("/checkout/sessions/{s}/identify"),
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(identified.status, 200, "{}", identified.body);
    let mut minted_in_s = shop.body(json!({"include_short_code": true}));
    minted_in_s["context"]["service_session_id"] = json!(s);
    let m = shop.post_body("/qr/mint", &minted_in_s).await;
    assert_eq!(m.status, 200, "{}", m.body);
    let code = m.body["data"]["short_code"].as_str().unwrap().to_string();
    let credential = json!({"type": "short_code", "short_code": code});

    let outside = shop
        .post_body("/payments", &payment(&shop, credential.clone(), None))
        .await;
    assert_eq!(
        outside.code(),
        "CREDENTIAL_EXPIRED_OR_REPLAYED",
        "{}",
        outside.body
    );
    let elsewhere = shop
        .post_body(
            "/payments",
            &payment(&shop, credential.clone(), Some(&other)),
        )
        .await;
    assert_eq!(
        elsewhere.code(),
        "CREDENTIAL_EXPIRED_OR_REPLAYED",
        "{}",
        elsewhere.body
    );
    let inside = shop
        .post_body("/payments", &payment(&shop, credential, Some(&s)))
        .await;
    assert_eq!(inside.status, 200, "{}", inside.body);
    assert_eq!(inside.body["data"]["service_session_id"], s.as_str());

    // Minted outside a session: pays inside one too (once identified with the customer).
    let free = shop.short_code(&c).await;
    let third = open_session(&shop).await;
    let r = shop
        .post(
            &format!("/checkout/sessions/{third}/identify"),
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post_body(
            "/payments",
            &payment(
                &shop,
                json!({"type": "short_code", "short_code": free}),
                Some(&third),
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let s_now = send(
        app.get(&format!("/checkout/sessions/{s}"))
            .bearer_auth(&shop.token),
    )
    .await;
    assert_eq!(s_now.body["data"]["state"], "COMPLETED");
    assert_eq!(shop.balance(&c).await["actual_minor"], 980);
}
