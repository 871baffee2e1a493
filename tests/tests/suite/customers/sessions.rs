//! Checkout sessions: opened at a till, identified, completed by their payment; a
//! cancelled, expired or foreign session pays nothing.
use super::*;
use serde_json::{Value, json};
use tests::{
    TestApp, send,
    shop::{Shop, envelope, random_phone},
};
use uuid::Uuid;

// --- Checkout sessions -------------------------------------------------------------------

pub(super) async fn open_session(shop: &Shop<'_>) -> String {
    let r = shop.post("/checkout/sessions", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "OPEN");
    r.body["data"]["session_id"].as_str().unwrap().to_string()
}

pub(super) fn in_session(mut body: Value, session: &str) -> Value {
    body["context"]["service_session_id"] = json!(session);
    body
}

#[tokio::test]
async fn a_session_opens_gets_identified_and_is_completed_by_its_payment() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let id = open_session(&shop).await;

    let r = shop
        .post(
            &format!("/checkout/sessions/{id}/identify"),
            json!({"customer": {"credential_type": "phone", "phone": random_phone()}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["resolution_state"], "not_found");
    assert_eq!(r.body["data"]["session"]["state"], "OPEN");

    for _ in 0..2 {
        // OPEN → IDENTIFIED, and IDENTIFIED → IDENTIFIED.
        let r = shop
            .post(
                &format!("/checkout/sessions/{id}/identify"),
                json!({"customer": by_phone(&c)}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["session"]["state"], "IDENTIFIED");
        assert_eq!(r.body["data"]["session"]["wallet_id"], c.wallet_id.as_str());
        // The identity resolution result, with the session beside it.
        assert_eq!(r.body["data"]["resolution_state"], "registered");
        assert_eq!(r.body["data"]["balance"]["actual_minor"], 1_000);
    }

    // A payment by another customer cannot run in this session.
    let stranger = shop.customer().await;
    shop.fund(&stranger, 500).await;
    let qr = shop.qr(&stranger).await;
    let r = shop
        .post_body(
            "/payments",
            &in_session(
                shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"})),
                &id,
            ),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(shop.balance(&stranger).await["actual_minor"], 500);

    let qr = shop.qr(&c).await;
    let paid = shop
        .post_body(
            "/payments",
            &in_session(
                shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 400, "currency": "EUR"})),
                &id,
            ),
        )
        .await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.body["data"]["service_session_id"], id.as_str());
    let s = send(
        app.get(&format!("/checkout/sessions/{id}"))
            .bearer_auth(&shop.token),
    )
    .await;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.body["data"]["state"], "COMPLETED");
    assert_eq!(
        s.body["data"]["payment_id"],
        paid.body["data"]["payment_id"]
    );

    // The nonce that paid, presented again in its completed session, is a replayed
    // credential: the credential is checked before the session's state, and its code
    // tells the cashier to mint a new nonce.
    let r = shop
        .post_body(
            "/payments",
            &in_session(
                shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"})),
                &id,
            ),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
        "{}",
        r.body
    );

    // A second payment in the completed session is refused and moves nothing.
    let qr = shop.qr(&c).await;
    let r = shop
        .post_body(
            "/payments",
            &in_session(
                shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"})),
                &id,
            ),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(r.body["error"]["details"]["session_state"], "COMPLETED");
    assert_eq!(shop.balance(&c).await["actual_minor"], 600);
    // Nor did it use up the fresh nonce: that still pays outside the session.
    let r = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 100)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 500);
    // And identification in it too.
    let r = shop
        .post(
            &format!("/checkout/sessions/{id}/identify"),
            json!({"customer": by_phone(&c)}),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"));
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_cancelled_or_expired_session_refuses_payments() {
    let app = TestApp::spawn_with(false, |cfg| cfg.checkout_session_ttl_secs = 1).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;

    let expiring = open_session(&shop).await;
    let cancelled = open_session(&shop).await;
    let r = shop
        .post(
            &format!("/checkout/sessions/{cancelled}/cancel"),
            json!({"reason": "customer left"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "CANCELLED");
    assert_eq!(r.body["data"]["close_reason"], "customer left");
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    let s = send(
        app.get(&format!("/checkout/sessions/{expiring}"))
            .bearer_auth(&shop.token),
    )
    .await;
    assert_eq!(s.body["data"]["state"], "EXPIRED");
    assert_eq!(s.body["data"]["close_reason"], "timeout");

    for (id, state) in [(cancelled, "CANCELLED"), (expiring, "EXPIRED")] {
        let qr = shop.qr(&c).await;
        let r = shop
            .post_body(
                "/payments",
                &in_session(
                    shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"})),
                    &id,
                ),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{}",
            r.body
        );
        assert_eq!(r.body["error"]["details"]["session_state"], state);
    }
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);
}

#[tokio::test]
async fn sessions_of_other_tenants_terminals_or_unknown_ids_are_refused() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let id = open_session(&shop).await;

    // Unknown id and another tenant's session: the same NOT_FOUND.
    let other = Shop::open(&app).await;
    for (who, sid) in [(&shop, Uuid::now_v7().to_string()), (&other, id.clone())] {
        let r = send(
            app.get(&format!("/checkout/sessions/{sid}"))
                .bearer_auth(&who.token),
        )
        .await;
        assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
        let r = who
            .post(
                &format!("/checkout/sessions/{sid}/identify"),
                json!({"customer": by_phone(&c)}),
            )
            .await;
        assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    }

    // Another terminal of the same merchant may not pay in it.
    let qr = shop.qr(&c).await;
    let mut body = in_session(
        shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"})),
        &id,
    );
    body["context"]["terminal_id"] = json!("till-2");
    // Neither the till-1 token naming till-2 (a token acts for its own terminal only) nor
    // till-2's own token.
    let r = shop.post_body("/payments", &body).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    let till_2 = shop.at_terminal(Some("till-2")).await;
    let r = till_2.post_body("/payments", &body).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);

    // A malformed session id is a validation error.
    let r = send(
        app.get("/checkout/sessions/not-a-uuid")
            .bearer_auth(&shop.token),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"));
    let mut body = envelope(shop.merchant());
    body["context"]["service_session_id"] = json!("nope");
    body["credential"] = json!({"type": "qr", "qr_payload": "wq1.x"});
    body["amount_minor"] = json!(1);
    body["currency"] = json!("EUR");
    let r = shop.post_body("/payments", &body).await;
    assert_eq!((r.status, r.code()), (400, "VALIDATION_ERROR"));
    assert!(
        r.field_issues()
            .iter()
            .any(|(f, _)| f == "/context/service_session_id")
    );
}
