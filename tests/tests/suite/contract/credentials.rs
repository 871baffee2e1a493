//! Which payment credentials the contract advertises and which it needs.
use serde_json::json;
use tests::{TestApp, send, shop::Shop};

/// REQUIRES_DYNAMIC_CREDENTIAL (422), "Path needs a dynamic credential (QR or OTP)": a
/// payment presented with a static identifier of the customer (a phone, a card
/// fingerprint, a provider or wallet id) is refused with the accepted types, and moves
/// nothing. And no credential type is advertised that can never succeed: the OpenAPI
/// union and GET /capabilities list the same enabled types, without `pass_tap`.
#[tokio::test]
async fn a_payment_needs_a_dynamic_credential_and_only_enabled_types_are_advertised() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let caps = send(
        app.get("/capabilities")
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    let enabled = caps.body["data"]["supported_payment_credential_types"].clone();
    assert_eq!(enabled, json!(["otp", "qr", "short_code"]));
    for cred in [
        json!({"type": "phone", "phone": c.phone}),
        json!({"type": "wallet_user_id", "wallet_user_id": c.wallet_user_id}),
        json!({"type": "card_fingerprint", "card_fingerprint": "fp-0123456789"}),
        json!({"type": "provider_customer_id", "provider_customer_id": "cust-1"}),
    ] {
        let r = shop.pay_with(cred.clone(), 100).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (422, "REQUIRES_DYNAMIC_CREDENTIAL"),
            "{cred}: {}",
            r.body
        );
        assert_eq!(
            r.body["error"]["details"]["accepted"], enabled,
            "{}",
            r.body
        );
        assert_eq!(r.body["error"]["details"]["presented"], cred["type"]);
    }
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);

    let doc = send(app.get("/openapi.json")).await;
    assert_eq!(doc.status, 200);
    let union = &doc.body["components"]["schemas"]["PaymentCredential"];
    let mut advertised: Vec<String> = union["discriminator"]["mapping"]
        .as_object()
        .expect("a discriminator mapping")
        .keys()
        .cloned()
        .collect();
    advertised.sort();
    assert_eq!(json!(advertised), enabled, "{union}");
}
