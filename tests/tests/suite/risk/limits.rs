//! Velocity limits a merchant sets (GET/PUT /v1/risk/limits, permission `risk`), checked
//! inside the payment's transaction: concurrent payments never pass a limit together.
use futures::future::join_all;
use serde_json::{Value, json};
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

use super::alerts;

async fn set_limits(shop: &Shop<'_>, limits: Value) -> tests::Reply {
    send(
        shop.app
            .put("/risk/limits")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&shop.body(json!({"limits": limits}))),
    )
    .await
}

/// Registers SKU `card-10`: a top-up card crediting 1,000.
async fn register_card(shop: &Shop<'_>) {
    let r = send(
        shop.app
            .post("/skus")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&shop.body(
                json!({"sku_id": "card-10", "name": "Top-up card", "currency": "EUR",
                                    "wallet_credits_minor": 1_000}),
            )),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn limits_are_read_and_replaced_whole_per_mode_with_the_risk_permission() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let read = |key: String| {
        let app = &app;
        let merchant = shop.merchant();
        async move {
            send(
                app.get(&format!("/risk/limits?merchant_id={merchant}"))
                    .header("x-api-key", key),
            )
            .await
        }
    };
    let r = read(shop.tenant.platform_key.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["limits"]["payment_max_minor"], Value::Null);
    assert_eq!(r.body["data"]["sandbox"], true);
    assert_eq!(r.body["data"]["updated_at"], Value::Null);

    let r = set_limits(
        &shop,
        json!({"payment_max_minor": 5_000, "wallet_payments_24h_count": 3}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["limits"]["payment_max_minor"], 5_000);
    let r = set_limits(&shop, json!({"wallet_payments_7d_minor": 10_000})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = read(shop.tenant.platform_key.clone()).await;
    assert_eq!(r.body["data"]["limits"]["wallet_payments_7d_minor"], 10_000);
    assert_eq!(
        r.body["data"]["limits"]["payment_max_minor"],
        Value::Null,
        "a PUT replaces them all"
    );

    for bad in [
        json!({"payment_max_minor": 0}),
        json!({"wallet_payments_24h_count": -1}),
    ] {
        let r = set_limits(&shop, bad).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{}",
            r.body
        );
    }

    // A key without `risk` (a till's default set) may not read or set them.
    let minted = send(
        app.post("/auth/keys")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(
                &shop.body(json!({"enterprise_id": shop.merchant().to_string(), "label": "till"})),
            ),
    )
    .await;
    assert_eq!(minted.status, 200, "{}", minted.body);
    let till_key = minted.body["data"]["raw_key"].as_str().unwrap().to_string();
    let r = read(till_key).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["missing_permissions"],
        json!(["risk"])
    );
}

/// The issue's race: a wallet allowed N payments a day, 30 payments at once, exactly N
/// pass. The rest are RATE_LIMITED naming the rule and carrying the decision's trace id,
/// and one alert fires for the crossing.
#[tokio::test]
async fn thirty_concurrent_payments_of_a_wallet_allowed_n_a_day_give_exactly_n() {
    const N: usize = 7;
    // Thirty live OTP sessions for one wallet: above the default per-wallet send limit.
    let app = TestApp::spawn_with(true, |c| c.otp_sends_per_wallet = 100).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100_000).await;
    let r = set_limits(&shop, json!({"wallet_payments_24h_count": N})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sessions = shop.otp_sessions(&c, 30, 100).await;
    let results = join_all(sessions.iter().map(|(order, session, code)| {
        shop.post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order,
                   "meta": {"decision_trace_id": format!("dtr-{order}")}}),
        )
    }))
    .await;
    let ok = results.iter().filter(|r| r.status == 200).count();
    let limited: Vec<_> = results.iter().filter(|r| r.status == 429).collect();
    assert_eq!(
        (ok, limited.len()),
        (N, 30 - N),
        "{:?}",
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    for r in &limited {
        assert_eq!(r.code(), "RATE_LIMITED");
        let l = &r.body["error"]["details"]["limit"];
        assert_eq!(l["rule"], "wallet_payments_24h_count", "{}", r.body);
        assert_eq!(l["scope"], "wallet");
        assert_eq!(l["window_seconds"], 86_400);
        assert_eq!(l["limit"], N);
        assert_eq!(l["used"], N);
        assert_eq!(l["remaining"], 0);
        assert_eq!(l["wallet_id"], c.wallet_id.as_str());
        assert!(
            r.body["meta"]["decision_trace_id"]
                .as_str()
                .unwrap()
                .starts_with("dtr-C-")
        );
        let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((86_000..=86_400).contains(&retry), "{retry}");
    }
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        100_000 - 100 * N as i64
    );
    let raised = alerts(&app, &shop).await;
    assert_eq!(raised.len(), 1, "once per crossing: {raised:?}");
    assert_eq!(raised[0]["scope"], "wallet");
    assert_eq!(raised[0]["rule"], "wallet_payments_24h_count");
    assert_eq!(raised[0]["subject"]["wallet_id"], c.wallet_id.as_str());
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

/// The largest single payment is a validation error (no wait makes it pass); the sums per
/// wallet and per terminal refuse what would pass them, and the merchant's other terminal
/// goes on; sandbox and live limits are separate.
#[tokio::test]
async fn amount_limits_refuse_what_would_pass_them_per_payment_wallet_and_terminal() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100_000).await;
    let r = set_limits(
        &shop,
        json!({"payment_max_minor": 500, "terminal_payments_1h_minor": 1_000, "wallet_payments_7d_minor": 1_500}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let r = shop.pay(&c, 501).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(
        r.body["error"]["details"]["limit"]["rule"],
        "payment_max_minor"
    );
    assert!(
        r.field_issues()
            .iter()
            .any(|(f, i)| f == "/amount_minor" && i == "over_limit")
    );

    assert_eq!(shop.pay(&c, 500).await.status, 200);
    assert_eq!(shop.pay(&c, 400).await.status, 200);
    // 900 of the terminal's 1,000 this hour: 101 would pass it.
    let r = shop.pay(&c, 101).await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    let l = &r.body["error"]["details"]["limit"];
    assert_eq!(
        (l["rule"].as_str(), l["scope"].as_str()),
        (Some("terminal_payments_1h_minor"), Some("terminal"))
    );
    assert_eq!(
        (l["used"].as_i64(), l["remaining"].as_i64()),
        (Some(900), Some(100))
    );
    assert_eq!(l["terminal_id"], "till-1");
    assert_eq!(shop.pay(&c, 100).await.status, 200);

    // Another till of the merchant has its own hour; the wallet's week still counts: 1,000
    // of 1,500 used.
    let other = shop.at_terminal(Some("till-2")).await;
    let r = other.pay(&c, 501).await;
    assert_eq!(r.code(), "VALIDATION_ERROR", "{}", r.body);
    let r = other.pay(&c, 500).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = other.pay(&c, 1).await;
    assert_eq!(
        r.body["error"]["details"]["limit"]["rule"], "wallet_payments_7d_minor",
        "{}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 100_000 - 1_500);

    // Two alerts: the terminal's hour and the wallet's week.
    let raised = alerts(&app, &shop).await;
    let rules: Vec<_> = raised
        .iter()
        .map(|a| a["rule"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        rules,
        ["terminal_payments_1h_minor", "wallet_payments_7d_minor"]
    );

    // The same merchant's live payments (through a live integration) have limits of their
    // own, none set: the sandbox's largest payment does not apply.
    let live = shop.through_new_integration(false).await;
    let r = live.pay(&c, 5_000).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = send(
        app.get(&format!("/risk/limits?merchant_id={}", shop.merchant()))
            .header("x-api-key", &live.tenant.platform_key),
    )
    .await;
    assert_eq!(
        (
            r.body["data"]["sandbox"].as_bool(),
            r.body["data"]["limits"]["payment_max_minor"].as_i64()
        ),
        (Some(false), None)
    );
    shop.assert_ledger_consistent().await;
}

/// A wallet's top-ups in any 24 hours stop at the merchant's limit; the credit that would
/// pass it is refused and changes nothing.
#[tokio::test]
async fn top_ups_past_the_daily_limit_are_refused_and_credit_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    register_card(&shop).await;
    assert_eq!(
        set_limits(&shop, json!({"wallet_topups_24h_minor": 2_500}))
            .await
            .status,
        200
    );
    let topup = |order: &str| {
        shop.post(
            "/topup/sku/card-10",
            json!({"pos_order_ref": order, "customer": {"credential_type": "phone", "phone": c.phone},
                   "quantity": 1}),
        )
    };
    assert_eq!(topup("T-1").await.status, 200);
    assert_eq!(topup("T-2").await.status, 200);
    let r = topup("T-3").await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["limit"]["rule"],
        "wallet_topups_24h_minor"
    );
    assert_eq!(r.body["error"]["details"]["limit"]["remaining"], 500);
    assert_eq!(shop.balance(&c).await["actual_minor"], 2_000);
    assert_eq!(alerts(&app, &shop).await.len(), 1);
    shop.assert_ledger_consistent().await;
}

/// The two limits counted outside the wallet's payments, under concurrency: ten top-ups of
/// one wallet at once against a daily limit of 2,500 credit exactly two of 1,000 (the
/// wallet's lock), and ten payments at once from ten wallets at one terminal against an
/// hourly 350 take exactly three of 100 (the terminal's row lock).
#[tokio::test]
async fn concurrent_top_ups_and_a_terminals_concurrent_payments_never_pass_their_limits() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    register_card(&shop).await;
    let set = set_limits(
        &shop,
        json!({"wallet_topups_24h_minor": 2_500, "terminal_payments_1h_minor": 350}),
    )
    .await;
    assert_eq!(set.status, 200, "{}", set.body);

    let c = shop.customer().await;
    let topups = join_all((0..10).map(|i| {
        shop.post(
            "/topup/sku/card-10",
            json!({"pos_order_ref": format!("T-{i}"),
                   "customer": {"credential_type": "phone", "phone": c.phone}, "quantity": 1}),
        )
    }))
    .await;
    let credited = topups.iter().filter(|r| r.status == 200).count();
    let limited = topups
        .iter()
        .filter(|r| r.body["error"]["details"]["limit"]["rule"] == "wallet_topups_24h_minor")
        .count();
    assert_eq!(
        (credited, limited),
        (2, 8),
        "{:?}",
        topups.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 2_000);

    let mut qrs = Vec::new();
    for _ in 0..10 {
        let w = shop.customer().await;
        shop.fund(&w, 1_000).await;
        qrs.push(shop.qr(&w).await);
    }
    let paid = join_all(
        qrs.iter()
            .map(|qr| shop.pay_with(json!({"type": "qr", "qr_payload": qr}), 100)),
    )
    .await;
    let ok = paid.iter().filter(|r| r.status == 200).count();
    let limited = paid
        .iter()
        .filter(|r| r.body["error"]["details"]["limit"]["rule"] == "terminal_payments_1h_minor")
        .count();
    assert_eq!(
        (ok, limited),
        (3, 7),
        "{:?}",
        paid.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    let rules: Vec<String> = alerts(&app, &shop)
        .await
        .iter()
        .map(|a| a["rule"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        rules,
        ["wallet_topups_24h_minor", "terminal_payments_1h_minor"]
    );
    shop.assert_ledger_consistent().await;
}
