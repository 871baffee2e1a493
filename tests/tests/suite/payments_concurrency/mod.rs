//! No interleaving of concurrent requests overdraws a wallet, spends a grant or a credential
//! twice, or refunds more than was paid; and random sequences of money operations agree
//! with a simple reference model after every step.
mod model;
mod waits;

use futures::future::join_all;
use serde_json::json;
use tests::{TestApp, shop::Shop};
use uuid::Uuid;

#[tokio::test]
async fn fifty_concurrent_payments_at_a_wallet_funded_for_ten_land_exactly_ten() {
    // Fifty live OTP sessions for one wallet: above the default per-wallet send limit.
    let app = TestApp::spawn_with(true, |c| c.otp_sends_per_wallet = 100).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 600).await;
    shop.grant(&c, 400, "RELEASED", 3_600).await;
    let sessions = shop.otp_sessions(&c, 50, 100).await;

    let results = join_all(sessions.iter().map(|(order, session, code)| {
        shop.post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order}),
        )
    }))
    .await;
    let ok = results.iter().filter(|r| r.status == 200).count();
    let short = results
        .iter()
        .filter(|r| r.code() == "INSUFFICIENT_FUNDS")
        .count();
    let others: Vec<_> = results
        .iter()
        .filter(|r| r.status != 200 && r.code() != "INSUFFICIENT_FUNDS")
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!((ok, short), (10, 40), "unexpected: {others:?}");
    let promo: i64 = results
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.body["data"]["debited_promo_minor"].as_i64().unwrap())
        .sum();
    assert_eq!(promo, 400, "the grant was spent exactly once");
    let b = shop.balance(&c).await;
    assert_eq!(
        (
            b["actual_minor"].as_i64(),
            b["promo_available_minor"].as_i64()
        ),
        (Some(0), Some(0))
    );
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn concurrent_wrong_otp_guesses_get_three_tries_in_all() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let (order, session, code) = shop.otp_sessions(&c, 1, 100).await.remove(0);
    let guesses: Vec<String> = (0..20)
        .map(|i| format!("{:06}", (code.parse::<u32>().unwrap() + 1 + i) % 1_000_000))
        .collect();
    let results = join_all(guesses.iter().map(|g| {
        shop.post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": g, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order}),
        )
    }))
    .await;
    let wrong = results.iter().filter(|r| r.code() == "OTP_INVALID").count();
    let locked = results
        .iter()
        .filter(|r| r.code() == "RATE_LIMITED")
        .count();
    assert_eq!(
        (wrong, locked),
        (3, 17),
        "{:?}",
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    let r = shop
        .post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order}),
        )
        .await;
    assert_eq!(
        r.code(),
        "RATE_LIMITED",
        "the right code no longer works: {}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);
    app.stop().await;
}

/// Exactly one of the payments presenting one single-use credential went through; every
/// other one heard that the credential was used.
fn assert_one_paid_and_the_rest_replayed(results: &[tests::Reply]) {
    let ok = results.iter().filter(|r| r.status == 200).count();
    assert_eq!(
        ok,
        1,
        "{:?}",
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    assert!(
        results
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.code() == "CREDENTIAL_EXPIRED_OR_REPLAYED")
    );
}

#[tokio::test]
async fn one_qr_nonce_presented_concurrently_pays_exactly_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let qr = shop.qr(&c).await;
    let results =
        join_all((0..20).map(|_| shop.pay_with(json!({"type": "qr", "qr_payload": qr}), 100)))
            .await;
    assert_one_paid_and_the_rest_replayed(&results);
    assert_eq!(shop.balance(&c).await["actual_minor"], 9_900);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn one_short_code_presented_concurrently_pays_exactly_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let code = shop.short_code(&c).await;
    // Fewer than the integration's budget of failed short codes, so every loser hears why.
    let results = join_all(
        (0..10).map(|_| shop.pay_with(json!({"type": "short_code", "short_code": code}), 100)),
    )
    .await;
    assert_one_paid_and_the_rest_replayed(&results);
    assert_eq!(shop.balance(&c).await["actual_minor"], 9_900);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn one_right_otp_presented_concurrently_pays_exactly_once() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let (order, session, code) = shop.otp_sessions(&c, 1, 100).await.remove(0);
    let results = join_all((0..10).map(|_| {
        shop.post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order}),
        )
    }))
    .await;
    let bodies = || {
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        results.iter().filter(|r| r.status == 200).count(),
        1,
        "{:?}",
        bodies()
    );
    // The others heard the code was spent, never that it was wrong (a right code is not
    // counted against the session).
    assert!(
        results
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| matches!(r.code(), "OTP_EXPIRED" | "CREDENTIAL_EXPIRED_OR_REPLAYED")),
        "{:?}",
        bodies()
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 9_900);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn concurrent_retries_with_one_idempotency_key_debit_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let key = Uuid::new_v4().to_string();
    let extra = json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 250, "currency": "EUR"});
    let results =
        join_all((0..10).map(|_| shop.post_with_key("/payments", extra.clone(), &key))).await;
    let ids: std::collections::HashSet<_> = results
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.body["data"]["payment_id"].to_string())
        .collect();
    assert_eq!(ids.len(), 1, "one payment, the rest replays");
    assert!(
        results
            .iter()
            .all(|r| r.status == 200 || r.code() == "CONFLICT")
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 750);
}

#[tokio::test]
async fn concurrent_refunds_never_return_more_than_was_paid() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.grant(&c, 500, "RELEASED", 3_600).await;
    let paid = shop.pay(&c, 1_000).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/payments/{id}/refund");
    let results = join_all((0..25).map(|_| shop.post(&path, json!({"amount_minor": 100})))).await;
    let ok = results.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 10);
    assert!(
        results
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.code() == "VALIDATION_ERROR")
    );
    let b = shop.balance(&c).await;
    assert_eq!(
        b["actual_minor"].as_i64().unwrap() + b["promo_available_minor"].as_i64().unwrap(),
        1_500
    );
    shop.assert_ledger_consistent().await;
}

// --- Reference model ---------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Credit(i64),
    Grant(i64),
    Pay(i64),
    Refund(usize, i64),
    Void(usize),
}

#[tokio::test]
async fn concurrent_operator_debits_never_take_a_wallet_below_zero() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let path = format!("/operator/wallets/{}/adjustments", c.wallet_id);
    let results = join_all((0..12).map(|_| {
        shop.operator(
            &path,
            json!({"direction": "debit", "amount_minor": 100, "currency": "EUR", "reason": "correction"}),
        )
    }))
    .await;
    let ok = results.iter().filter(|r| r.status == 200).count();
    assert_eq!(
        ok,
        5,
        "{:?}",
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    assert!(
        results
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.code() == "INSUFFICIENT_FUNDS")
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 0);
    shop.assert_ledger_consistent().await;
}

/// Two payments racing in one checkout session: the session completes once. The first
/// takes the session's lock and completes it; the second, whose credential is checked
/// before the session's state, is refused `session_closed` and its OTP is rolled back
/// unused, so it still pays outside the session. One debit in the session, never two.
#[tokio::test]
async fn two_payments_racing_in_one_checkout_session_complete_it_once() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let r = shop.post("/checkout/sessions", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let r = shop
        .post(
            &format!("/checkout/sessions/{session}/identify"),
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let otps = shop.otp_sessions(&c, 2, 100).await;
    let pay = |(order, id, code): &(String, String, String), in_session: bool| {
        let mut body = json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code,
                                             "otp_session_id": id},
                              "amount_minor": 100, "currency": "EUR", "order_ref": order});
        if in_session {
            body["context"] = json!({"service_session_id": session});
        }
        shop.post("/payments", body)
    };
    let answers = join_all(otps.iter().map(|o| pay(o, true))).await;
    let paid: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    assert_eq!(paid.len(), 1, "{answers:?}");
    let refused = answers.iter().find(|r| r.status != 200).unwrap();
    assert_eq!(refused.code(), "VALIDATION_ERROR", "{}", refused.body);
    assert_eq!(
        refused.body["error"]["details"]["session_state"],
        "COMPLETED"
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
    // The refused payment's OTP was not used up: it pays outside the session.
    let loser = otps
        .iter()
        .find(|(order, ..)| paid[0].body["data"]["order_ref"] != order.as_str())
        .unwrap();
    let r = pay(loser, false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 800);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}
