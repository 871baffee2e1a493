//! What holds for every payment: a retry never debits twice, another tenant sees nothing,
//! and every money change writes its events in order.

use super::*;
use serde_json::{Value, json};
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

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
    assert_eq!(again.text(), first.as_replayed(), "byte for byte");
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
