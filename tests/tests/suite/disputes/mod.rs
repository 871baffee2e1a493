//! Corrections after the fact (issue 26.11): a dispute of a payment or top-up fires
//! transaction.disputed when it opens (no money moves) and when it resolves (a customer win
//! refunds the payment or takes the top-up's credit back); detaching a top-up from a
//! customer fires transaction.unattached. Each writes its event in the transaction's own
//! sequence, moves money only through balanced postings, and is a movement in the feed.
use serde_json::{Value, json};
use tests::{
    Reply, TestApp, send,
    shop::{Customer, Shop},
};
use uuid::Uuid;

pub(super) async fn post(shop: &Shop<'_>, key: &str, path: &str, extra: Value) -> Reply {
    send(
        shop.app
            .post(&format!("/{}{path}", shop.tenant.integration_id))
            .header("x-api-key", key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&shop.body(extra)),
    )
    .await
}

pub(super) async fn correct(shop: &Shop<'_>, path: &str, extra: Value) -> Reply {
    post(shop, &shop.tenant.platform_key, path, extra).await
}

pub(super) async fn open(shop: &Shop<'_>, id: &str, extra: Value) -> Reply {
    correct(shop, &format!("/transactions/{id}/disputes"), extra).await
}

pub(super) async fn resolve(shop: &Shop<'_>, id: &str, dispute: &str, outcome: &str) -> Reply {
    correct(
        shop,
        &format!("/transactions/{id}/disputes/{dispute}/resolve"),
        json!({"outcome": outcome, "note": "case closed"}),
    )
    .await
}

pub(super) async fn detail(shop: &Shop<'_>, id: &str) -> Value {
    let r = send(
        shop.app
            .get(&format!(
                "/{}/transactions/{id}",
                shop.tenant.integration_id
            ))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].clone()
}

pub(super) async fn feed(shop: &Shop<'_>) -> Vec<Value> {
    let r = send(
        shop.app
            .get(&format!("/{}/transactions", shop.tenant.integration_id))
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().clone()
}

/// The event types of a transaction, in its sequence (which must only grow).
pub(super) fn event_types(d: &Value) -> Vec<String> {
    let events = d["events"].as_array().unwrap();
    let seqs: Vec<i64> = events
        .iter()
        .map(|e| e["sequence_number"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sequence: {seqs:?}");
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect()
}

/// The one field error of a VALIDATION_ERROR.
pub(super) fn field(r: &Reply) -> (String, String) {
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    r.field_issues().remove(0)
}

pub(super) async fn paid(shop: &Shop<'_>, c: &Customer, amount: i64) -> String {
    let p = shop.pay(c, amount).await;
    assert_eq!(p.status, 200, "{}", p.body);
    p.body["data"]["payment_id"].as_str().unwrap().to_string()
}

/// A SKU of 1 000 with a bonus of 100, sold once to `phone`: the top-up's id.
pub(super) async fn topped_up(shop: &Shop<'_>, phone: &str) -> String {
    let r = send(
        shop.app
            .post("/skus")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(
                &shop.body(json!({"sku_id": "CARD-10", "name": "Top-up card",
                "currency": "EUR", "wallet_credits_minor": 1_000,
                "bonus": {"amount_minor": 100, "expiry_days": 30}})),
            ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post(
            "/topup/sku/CARD-10",
            json!({"pos_order_ref": format!("POS-{}", Uuid::new_v4()),
                   "customer": {"credential_type": "phone", "phone": phone}, "quantity": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["credited_actual_minor"], 1_000);
    r.body["data"]["topup_id"].as_str().unwrap().to_string()
}

/// Detaches `id` from its customer with the platform key.
pub(super) async fn unattach(shop: &Shop<'_>, id: &str, reason: &str) -> Reply {
    correct(
        shop,
        &format!("/transactions/{id}/unattach"),
        json!({ "reason": reason }),
    )
    .await
}

mod detaching;
mod payments;
mod permissions;
mod topups;
