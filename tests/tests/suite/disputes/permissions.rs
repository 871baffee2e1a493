//! Corrections need the `corrections` permission and never reach another integration.
use super::*;
use crate::suite::keys::create;

#[tokio::test]
async fn corrections_need_their_permission_and_never_reach_another_integration() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let payment = paid(&shop, &c, 400).await;

    // A per-merchant key minted without a set runs a till and reads the feed only.
    let k = create(&app, &shop.tenant.platform_key, &shop.tenant, json!({})).await;
    assert_eq!(k.status, 200, "{}", k.body);
    let till_key = k.body["data"]["raw_key"].as_str().unwrap().to_string();
    let r = post(
        &shop,
        &till_key,
        &format!("/transactions/{payment}/disputes"),
        json!({"reason": "x"}),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["missing_permissions"],
        json!(["corrections"])
    );

    // Another tenant's platform key: its own integration in the path finds nothing of ours
    // but FORBIDDEN (the transaction reads' rule), ours in the path is FORBIDDEN too.
    for integration in [other.tenant.integration_id, shop.tenant.integration_id] {
        let r = send(
            app.post(&format!("/{integration}/transactions/{payment}/disputes"))
                .header("x-api-key", &other.tenant.platform_key)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(&other.body(json!({"reason": "probe"}))),
        )
        .await;
        assert_eq!(r.code(), "FORBIDDEN", "{}", r.body);
    }
    let unknown = open(&shop, &Uuid::now_v7().to_string(), json!({"reason": "x"})).await;
    assert_eq!(unknown.code(), "NOT_FOUND", "{}", unknown.body);
    assert!(
        detail(&shop, &payment).await["disputes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
