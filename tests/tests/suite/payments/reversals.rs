//! Voids and refunds: money back, never more than was paid, promo to its grant while the
//! grant is usable.
use std::time::Duration;

use serde_json::json;
use tests::{TestApp, send, shop::Shop};

#[tokio::test]
async fn a_void_reverses_in_full_once_and_returns_promo_to_its_grant() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 400).await;
    let g = shop.grant(&c, 100, "RELEASED", 3_600).await;
    let paid = shop.pay(&c, 300).await;
    assert_eq!(paid.body["data"]["debited_promo_minor"], 100);
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();

    let r = shop
        .post(
            &format!("/payments/{id}/void"),
            json!({"reason": "wrong till"}),
        )
        .await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["payment"]["status"], "voided");
    assert_eq!(r.body["data"]["refund"]["returned_actual_minor"], 200);
    assert_eq!(r.body["data"]["refund"]["returned_promo_minor"], 100);
    let after = &r.body["data"]["balance_after"];
    assert_eq!(after["actual_minor"], 400);
    assert_eq!(after["promo_available_minor"], 100);
    assert_eq!(after["promo_grants"][0]["grant_id"], g.as_str());

    let again = shop.post(&format!("/payments/{id}/void"), json!({})).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(
        again.body["data"]["refund"].is_null(),
        "nothing reversed twice"
    );
    let refund = shop
        .post(&format!("/payments/{id}/refund"), json!({}))
        .await;
    assert_eq!(
        (refund.status, refund.code()),
        (409, "CONFLICT"),
        "{}",
        refund.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 400);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn refunds_return_part_or_all_but_never_more_than_was_paid() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let paid = shop.pay(&c, 1_000).await;
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/payments/{id}/refund");
    let refund = |amount: Option<i64>| {
        let body = match amount {
            Some(a) => json!({"amount_minor": a, "currency": "EUR"}),
            None => json!({}),
        };
        shop.post(&path, body)
    };
    let r = refund(Some(300)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["payment"]["refunded_minor"], 300);
    assert_eq!(r.body["data"]["payment"]["status"], "completed");
    let r = refund(Some(701)).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    let r = refund(None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["refund"]["amount_minor"], 700);
    assert_eq!(r.body["data"]["payment"]["refundable_minor"], 0);
    let r = refund(Some(1)).await;
    assert_eq!(r.code(), "VALIDATION_ERROR");
    let void = shop.post(&format!("/payments/{id}/void"), json!({})).await;
    assert_eq!(
        void.code(),
        "VALIDATION_ERROR",
        "a refunded payment is not voided: {}",
        void.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);

    let got = send(app.get(&format!("/payments/{id}")).bearer_auth(&shop.token)).await;
    assert_eq!(got.body["data"]["refunds"].as_array().unwrap().len(), 2);
    let capture = shop
        .post(&format!("/payments/{id}/capture"), json!({}))
        .await;
    capture.assert_envelope();
    assert_eq!(
        (capture.status, capture.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        capture.body
    );
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_refunded_promo_part_whose_grant_expired_is_forfeited_not_revived() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 100).await;
    shop.grant(&c, 200, "RELEASED", 2).await;
    let paid = shop.pay(&c, 250).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.body["data"]["debited_promo_minor"], 200);
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let r = shop
        .post(&format!("/payments/{id}/refund"), json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["refund"]["returned_actual_minor"], 50);
    assert_eq!(r.body["data"]["refund"]["forfeited_promo_minor"], 200);
    assert_eq!(r.body["data"]["balance_after"]["actual_minor"], 100);
    assert_eq!(r.body["data"]["balance_after"]["promo_available_minor"], 0);
    shop.assert_ledger_consistent().await;
}
