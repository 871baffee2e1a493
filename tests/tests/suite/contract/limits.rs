//! The identify rate limit on every route that resolves a customer from an identifier.
use serde_json::{Value, json};
use tests::{TestApp, shop::Shop};
use uuid::Uuid;

/// "Rate limiting is applied per integration on identify": on every route that resolves a
/// customer from an identifier too, one budget per integration, so no route is a side
/// door for enumerating phone numbers. Past it each answers 429 RATE_LIMITED with
/// Retry-After and X-RateLimit-* headers, and changes nothing.
#[tokio::test]
async fn every_route_that_resolves_a_customer_from_an_identifier_shares_the_identify_limit() {
    const BUDGET: u32 = 6;
    let app = TestApp::spawn_with(false, |c| {
        c.rate_limit = BUDGET;
        c.rate_limit_sandbox = BUDGET;
        c.rate_limit_window_secs = 3600;
    })
    .await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let sku = format!("card-{}", Uuid::new_v4().simple());
    let r = shop
        .control(
            "/skus",
            json!({"sku_id": sku, "name": "Card", "currency": "EUR", "wallet_credits_minor": 100}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let by_phone = json!({"credential_type": "phone", "phone": c.phone});
    let routes: Vec<(&str, String, Value)> = vec![
        (
            "identify",
            "/identify".into(),
            json!({"credential": by_phone}),
        ),
        ("claim", "/claims".into(), json!({"customer": by_phone})),
        (
            "offer evaluation",
            "/offers/evaluate".into(),
            json!({"customer": by_phone, "amount_minor": 100, "currency": "EUR"}),
        ),
        ("QR mint", "/qr/mint".into(), json!({"customer": by_phone})),
        (
            "OTP send",
            "/payments/otp/send".into(),
            json!({"phone": c.phone, "amount_minor": 10, "currency": "EUR", "order_ref": "o-1"}),
        ),
        (
            "SKU top-up",
            format!("/topup/sku/{sku}"),
            json!({"customer": by_phone, "quantity": 1, "pos_order_ref": "pos-1"}),
        ),
    ];
    assert_eq!(routes.len() as u32, BUDGET);
    for (what, path, extra) in &routes {
        let r = shop.post(path, extra.clone()).await;
        assert_eq!(r.status, 200, "{what} within the budget: {}", r.body);
    }
    let balance = shop.balance(&c).await;
    for (what, path, extra) in &routes {
        let r = shop.post(path, extra.clone()).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (429, "RATE_LIMITED"),
            "{what} past the shared budget: {}",
            r.body
        );
        assert!(r.headers.get("retry-after").is_some(), "{what}");
        assert_eq!(
            r.headers
                .get("x-ratelimit-limit")
                .and_then(|v| v.to_str().ok()),
            Some(BUDGET.to_string().as_str()),
            "{what}"
        );
        assert_eq!(
            r.headers
                .get("x-ratelimit-remaining")
                .and_then(|v| v.to_str().ok()),
            Some("0"),
            "{what}"
        );
    }
    assert_eq!(
        shop.balance(&c).await,
        balance,
        "a refused top-up credits nothing"
    );
}

/// A high configured limit is a limit, not an outage: at 1,000,000 identifications a
/// minute the interval is 60 µs, which the Redis limiter once rounded to 0 ms and
/// answered every identification with a 503 (the payments benchmark found it).
#[tokio::test]
async fn a_very_high_rate_limit_lets_requests_through() {
    let app = TestApp::spawn_with(false, |c| {
        c.rate_limit = 1_000_000;
        c.rate_limit_sandbox = 1_000_000;
    })
    .await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    for _ in 0..3 {
        let r = shop
            .post(
                "/identify",
                json!({"credential": {"credential_type": "phone", "phone": c.phone}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.headers
                .get("x-ratelimit-limit")
                .and_then(|v| v.to_str().ok()),
            Some("1000000")
        );
    }
}
