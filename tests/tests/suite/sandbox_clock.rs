//! Sandbox time travel: a sandbox integration moves its own clock forward and sees grants,
//! pending enrollments, QR nonces, OTPs and checkout sessions expire by it; the sweep that
//! acts on time follows it; no live key sees or moves a clock, and no other tenant's time
//! moves with it.
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tests::{
    Reply, TestApp, TestTenant, eventually, send,
    shop::{Customer, Shop},
};
use uuid::Uuid;

async fn read_clock(app: &TestApp, key: &str) -> Reply {
    send(app.get("/sandbox/clock").header("x-api-key", key)).await
}

/// `POST /sandbox/clock/advance` by `key` of tenant `t`, in the contract's envelope.
async fn advance_with(
    app: &TestApp,
    key: &str,
    t: &TestTenant,
    seconds: Value,
    idem: &str,
) -> Reply {
    send(
        app.post("/sandbox/clock/advance")
            .header("x-api-key", key)
            .header("Idempotency-Key", idem)
            .json(&json!({
                "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
                "context": {"merchant_id": t.merchant_id.to_string()},
                "seconds": seconds,
            })),
    )
    .await
}

async fn advance(app: &TestApp, t: &TestTenant, seconds: i64) -> Reply {
    let r = advance_with(
        app,
        &t.platform_key,
        t,
        json!(seconds),
        &Uuid::new_v4().to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

fn at(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {v}"))
}

fn offset(r: &Reply) -> i64 {
    r.body["data"]["offset_seconds"].as_i64().unwrap()
}

#[tokio::test]
async fn a_sandbox_platform_key_moves_its_clock_forward_and_never_back() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;

    let r = read_clock(&app, &t.platform_key).await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(offset(&r), 0);
    assert_eq!(r.body["data"]["now"], r.body["data"]["real_now"]);

    let idem = Uuid::new_v4().to_string();
    let first = advance_with(&app, &t.platform_key, &t, json!(3600), &idem).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(offset(&first), 3600);
    let d = &first.body["data"];
    assert_eq!(
        at(&d["now"]) - at(&d["real_now"]),
        chrono::Duration::hours(1)
    );

    // A retry replays the first answer and does not move the clock twice.
    let again = advance_with(&app, &t.platform_key, &t, json!(3600), &idem).await;
    assert_eq!(again.body["data"], first.body["data"]);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    assert_eq!(offset(&read_clock(&app, &t.platform_key).await), 3600);

    // Back, nowhere, too far at once or not a whole number of seconds: refused, unmoved.
    for bad in [
        json!(0),
        json!(-60),
        json!(31_622_401),
        json!(1.5),
        json!("60"),
    ] {
        let r = advance_with(
            &app,
            &t.platform_key,
            &t,
            bad.clone(),
            &Uuid::new_v4().to_string(),
        )
        .await;
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{bad}: {}",
            r.body
        );
        assert!(
            r.field_issues().iter().any(|(f, _)| f == "/seconds"),
            "{bad}: {}",
            r.body
        );
    }
    assert_eq!(offset(&read_clock(&app, &t.platform_key).await), 3600);

    // Steps add up, and the clock stops ten years and ten days ahead.
    assert_eq!(offset(&advance(&app, &t, 86_400).await), 90_000);
    let mut total = 90_000;
    while total + 31_622_400 <= 3_660 * 86_400 {
        total = offset(&advance(&app, &t, 31_622_400).await);
    }
    let r = advance_with(
        &app,
        &t.platform_key,
        &t,
        json!(31_622_400),
        &Uuid::new_v4().to_string(),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(offset(&read_clock(&app, &t.platform_key).await), total);
    app.stop().await;
}

#[tokio::test]
async fn no_live_key_sees_or_moves_a_clock_and_only_a_platform_key_moves_one() {
    let app = TestApp::spawn().await;
    let live = app.tenant(false).await;
    let r = read_clock(&app, &live.platform_key).await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    let r = advance_with(
        &app,
        &live.platform_key,
        &live,
        json!(60),
        &Uuid::new_v4().to_string(),
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);

    // A merchant's key reads its integration's clock but cannot move every merchant's time.
    let t = app.tenant(true).await;
    let made = crate::suite::keys::create(&app, &t.platform_key, &t, json!({})).await;
    assert_eq!(made.status, 200, "{}", made.body);
    let merchant_key = made.body["data"]["raw_key"].as_str().unwrap().to_string();
    let r = advance_with(
        &app,
        &merchant_key,
        &t,
        json!(60),
        &Uuid::new_v4().to_string(),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    advance(&app, &t, 120).await;
    assert_eq!(offset(&read_clock(&app, &merchant_key).await), 120);
    app.stop().await;
}

/// The customer's grant of `amount` expiring `secs` from now (real time).
async fn grant_expiring(shop: &Shop<'_>, c: &Customer, amount: i64, secs: i64) {
    shop.grant(c, amount, "RELEASED", secs).await;
    assert_eq!(shop.balance(c).await["promo_available_minor"], amount);
}

#[tokio::test]
async fn a_grant_expires_by_its_tenants_clock_and_no_other_tenants_time_moves() {
    let app = TestApp::spawn_with_workers().await;
    let (a, b) = (Shop::open(&app).await, Shop::open(&app).await);
    let (ca, cb) = (a.customer().await, b.customer().await);
    a.fund(&ca, 100).await;
    grant_expiring(&a, &ca, 500, 2 * 86_400).await;
    grant_expiring(&b, &cb, 500, 2 * 86_400).await;

    let before = Utc::now();
    advance(&app, &a.tenant, 3 * 86_400).await;

    // By the time the advance answers, the grant has expired, with its event.
    assert_eq!(a.balance(&ca).await["promo_available_minor"], 0);
    let r = a.pay(&ca, 101).await;
    assert_eq!(
        (r.status, r.code()),
        (402, "INSUFFICIENT_FUNDS"),
        "{}",
        r.body
    );
    let r = a.pay(&ca, 100).await;
    assert_eq!(
        r.status, 200,
        "the terminal token keeps real time: {}",
        r.body
    );
    let paid_at = at(&r.body["data"]["completed_at"]);
    assert!(
        paid_at >= before + chrono::Duration::days(3),
        "the payment is stamped with the tenant's time: {paid_at}"
    );
    let expired = eventually(Duration::from_secs(20), "promo_grant.expired", || async {
        let r = send(
            app.get("/events?event_type=promo_grant.expired")
                .header("x-api-key", &a.tenant.platform_key),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"].as_array().filter(|e| !e.is_empty()).cloned()
    })
    .await;
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert!(at(&expired[0]["occurred_at"]) >= before + chrono::Duration::days(3));
    a.assert_ledger_consistent().await;

    // The other tenant's time did not move.
    assert_eq!(b.balance(&cb).await["promo_available_minor"], 500);
    assert_eq!(offset(&read_clock(&app, &b.tenant.platform_key).await), 0);
    app.stop().await;
}

#[tokio::test]
async fn qr_nonces_otps_and_checkout_sessions_expire_by_the_tenants_clock() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;

    let qr = shop.qr(&c).await;
    let sent = shop
        .post(
            "/payments/otp/send",
            json!({"phone": c.phone, "amount_minor": 10, "currency": "EUR", "order_ref": "R-1"}),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    let session = sent.body["data"]["otp_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let sms = shop.sms_after(&c.phone, "otp", 0).await;
    let code = sms["code"].as_str().unwrap().to_string();
    let opened = shop.post("/checkout/sessions", json!({})).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let checkout = opened.body["data"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();

    // Past the 5-minute QR and OTP lifetimes and the 30-minute session by the tenant's time.
    advance(&app, &shop.tenant, 31 * 60).await;
    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 10)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
        "{}",
        r.body
    );
    let r = shop
        .pay_with(
            json!({"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session}),
            10,
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "OTP_EXPIRED"), "{}", r.body);
    let r = send(
        app.get(&format!("/checkout/sessions/{checkout}"))
            .bearer_auth(&shop.token),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "EXPIRED", "{}", r.body);

    // A nonce minted after the advance lives its five minutes on the same clock.
    let r = shop.pay(&c, 10).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 990);
    app.stop().await;
}

#[tokio::test]
async fn a_pending_enrollment_lapses_by_the_tenants_clock() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer_in("PENDING_PROOF").await;
    shop.fund(&c, 1_000).await;

    // The proof window is seven days.
    advance(&app, &shop.tenant, 6 * 86_400).await;
    let lookup = || async {
        send(
            app.get(&format!(
                "/customers/lookup?phone={}",
                c.phone.replace('+', "%2B")
            ))
            .bearer_auth(&shop.token),
        )
        .await
    };
    let r = lookup().await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"]["identity_state"], "PENDING_PROOF",
        "{}",
        r.body
    );

    advance(&app, &shop.tenant, 2 * 86_400).await;
    let r = lookup().await;
    assert_eq!(r.body["data"]["identity_state"], "EXPIRED", "{}", r.body);
    assert_eq!(r.body["data"]["escrowed_actual_minor"], 1_000);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn the_sweep_acts_on_an_advanced_clock() {
    let app = TestApp::spawn_isolated(true, |cfg| cfg.sweep_interval_secs = 1).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    grant_expiring(&shop, &c, 300, 86_400 + 8).await;

    // A day ahead, the grant has seconds left by the tenant's time (a day by real time):
    // the periodic sweep, not the advance, ends it.
    advance(&app, &shop.tenant, 86_400).await;
    assert_eq!(shop.balance(&c).await["promo_available_minor"], 300);
    eventually(
        Duration::from_secs(30),
        "the sweep expiring the grant",
        || async { (shop.balance(&c).await["promo_available_minor"] == 0).then_some(()) },
    )
    .await;
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn advances_at_once_all_count() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let steps = futures::future::join_all((0..5).map(|_| advance(&app, &t, 60))).await;
    assert!(steps.iter().all(|r| r.status == 200));
    assert_eq!(offset(&read_clock(&app, &t.platform_key).await), 300);
    app.stop().await;
}

#[tokio::test]
async fn a_payment_racing_the_advance_that_expires_its_grant_spends_or_forfeits_it_never_both() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    grant_expiring(&shop, &c, 500, 86_400).await;
    let qr = shop.qr(&c).await;

    let (paid, _) = tokio::join!(
        shop.pay_with(json!({"type": "qr", "qr_payload": qr}), 300),
        advance(&app, &shop.tenant, 2 * 86_400),
    );
    match paid.status {
        // Paid from the grant first; the advance then forfeited the remaining 200.
        200 => assert_eq!(paid.body["data"]["debited_promo_minor"], 300),
        // The grant expired first: nothing left to pay with.
        _ => assert_eq!(paid.code(), "INSUFFICIENT_FUNDS", "{}", paid.body),
    }
    let balance = shop.balance(&c).await;
    assert_eq!(balance["promo_available_minor"], 0);
    assert_eq!(balance["actual_minor"], 0);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}
