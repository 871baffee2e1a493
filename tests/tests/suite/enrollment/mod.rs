//! Enrollment and claims, as the spec's "Wallet identity (enrollment)" and "Promotional
//! grant" state tables state them: PENDING_PROOF cannot pay; proof (code or link) makes the
//! identity VERIFIED and releases its locked grants in one transaction; claims release
//! what is left; a lapsed window fires enrollment.expired and keeps the money in escrow.
mod lapse;
mod verify;

use api::store::Db;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use tests::{
    TestApp,
    shop::{Customer, Shop},
};
use uuid::Uuid;

async fn events(db: &Db, merchant: Uuid, topic: &str) -> Vec<Value> {
    entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(merchant))
        .filter(entities::outbox::Column::Topic.eq(topic))
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.payload)
        .collect()
}

async fn initiate(shop: &Shop<'_>, phone: &str) -> tests::Reply {
    shop.post("/enroll/initiate", json!({ "phone": phone }))
        .await
}

/// A customer the merchant knows only from a credit: a PENDING_PROOF proto-wallet holding
/// actual money and a LOCKED grant.
async fn proto_wallet(shop: &Shop<'_>) -> (Customer, String) {
    let c = shop.customer_in("PENDING_PROOF").await;
    shop.fund(&c, 1_000).await;
    let grant = shop.grant(&c, 250, "LOCKED", 3600).await;
    (c, grant)
}

#[tokio::test]
async fn the_proto_wallet_path_credit_then_proof_by_code_then_payment() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let db = &app.server.state.db;
    let (c, grant) = proto_wallet(&shop).await;
    let held = events(db, shop.merchant(), "enrollment.pending_proof").await;
    assert_eq!(
        held.len(),
        2,
        "the credit and the grant were each held: {held:?}"
    );

    // PENDING_PROOF cannot pay.
    let r = shop.pay(&c, 100).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);

    let r = initiate(&shop, &c.phone).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["state"], "PENDING_PROOF");
    assert_eq!(r.body["data"]["sms_sent"], true);
    assert_eq!(r.body["data"]["wallet_id"], c.wallet_id.as_str());
    let sms = shop.sms_after(&c.phone, "enrollment", 0).await;
    let code = sms["code"].as_str().unwrap();
    assert_eq!(code.len(), 6);
    assert!(sms["body"].as_str().unwrap().contains(code));

    let r = shop
        .post("/enroll/verify", json!({"code": code, "phone": c.phone}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["state"], "VERIFIED");
    assert_eq!(d["released_promo_minor"], 250);
    assert_eq!(d["released_grants"][0]["grant_id"], grant.as_str());
    assert_eq!(d["released_grants"][0]["state"], "RELEASED");
    assert_eq!(d["wallets"][0]["balance"]["promo_available_minor"], 250);
    assert_eq!(d["wallets"][0]["balance"]["promo_locked_minor"], 0);

    let released = events(db, shop.merchant(), "promo_grant.released").await;
    assert_eq!(released.len(), 1);
    assert_eq!(released[0]["grant_id"], grant.as_str());
    assert_eq!(
        events(db, shop.merchant(), "enrollment.verified")
            .await
            .len(),
        1
    );

    // Now it pays: the released grant first, then actual money.
    let r = shop.pay(&c, 400).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["debited_promo_minor"], 250);
    assert_eq!(r.body["data"]["debited_actual_minor"], 150);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}
