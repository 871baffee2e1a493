//! Wallet payments, as the spec's "Payments" rules state them.
mod credentials;
mod debits;
mod guarantees;
mod reversals;

use std::time::Duration;

use serde_json::{Value, json};
use tests::{
    eventually, send,
    shop::{Customer, Shop},
};

/// The code of the newest OTP SMS for the customer whose body names `order_ref`.
async fn otp_code(shop: &Shop<'_>, c: &Customer, order_ref: &str) -> String {
    let url = format!(
        "/sandbox/messages?phone={}&limit=200",
        c.phone.replace('+', "%2B")
    );
    eventually(Duration::from_secs(20), "the OTP SMS", || async {
        let r = send(
            shop.app
                .get(&url)
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        r.body["data"].as_array().and_then(|msgs| {
            msgs.iter()
                .find(|m| {
                    m["kind"] == "otp"
                        && m["body"]
                            .as_str()
                            .unwrap_or("")
                            .contains(&format!("order {order_ref}."))
                })
                .and_then(|m| m["code"].as_str().map(str::to_string))
        })
    })
    .await
}

async fn send_otp(shop: &Shop<'_>, c: &Customer, amount: i64, order_ref: &str) -> tests::Reply {
    shop.post(
        "/payments/otp/send",
        json!({"phone": c.phone, "amount_minor": amount, "currency": "EUR", "order_ref": order_ref}),
    )
    .await
}

fn otp(c: &Customer, code: &str, session: &str) -> Value {
    json!({"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session})
}

async fn pay_otp(shop: &Shop<'_>, cred: Value, amount: i64, order_ref: &str) -> tests::Reply {
    shop.post(
        "/payments",
        json!({"credential": cred, "amount_minor": amount, "currency": "EUR", "order_ref": order_ref}),
    )
    .await
}

/// An OTP sent for `order_ref`: its session id and the code the sandbox inbox got.
pub(crate) async fn otp_for(
    shop: &Shop<'_>,
    c: &Customer,
    amount: i64,
    order_ref: &str,
) -> (String, String) {
    let r = send_otp(shop, c, amount, order_ref).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["otp_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    (session, otp_code(shop, c, order_ref).await)
}

/// Drops the short-lived copies of a terminal's response under `key` (Redis in production,
/// in process in embedded mode), as their expiry would: only the database record is left.
async fn drop_response_copies(shop: &Shop<'_>, key: &str) {
    let state = &shop.app.server.state;
    state
        .kv
        .del(&[api::idempotency::copy_key(shop.tenant.integration_id, key)])
        .await
        .unwrap();
    state.recent_responses.clear();
}
