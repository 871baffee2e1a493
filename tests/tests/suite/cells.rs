//! Cells (docs/scaling.md, section 6): a key and a token name the cell that minted them, so
//! a router finds the cell from the credential alone; a cell refuses what another minted,
//! even where the two share their token secret.
use api::domain::platform::cells;
use tests::{
    TestApp, send,
    shop::{Shop, envelope},
};
use uuid::Uuid;

#[tokio::test]
async fn keys_and_tokens_name_their_cell_and_no_other_cell_takes_them() {
    let c7 = TestApp::spawn_isolated(false, |c| c.cell = Some("c7".into())).await;
    let shop = Shop::open(&c7).await;
    let key = &shop.tenant.platform_key;
    assert!(key.starts_with("wk_testc7_"), "{key}");
    assert_eq!(cells::cell_of_key(key), Some("c7"));
    assert_eq!(cells::cell_of_token(&shop.token).as_deref(), Some("c7"));

    // Served in its own cell: the token validates, money moves.
    let v = send(c7.get("/auth/token/validate").bearer_auth(&shop.token)).await;
    assert_eq!(v.body["data"]["valid"], true, "{}", v.body);
    let c = shop.customer().await;
    assert_eq!(shop.fund(&c, 500).await.status, 200);

    // The home cell runs with the same token secret (the harness gives every app one):
    // the signature is good, the cell is not.
    let home = TestApp::spawn().await;
    let v = send(home.get("/auth/token/validate").bearer_auth(&shop.token)).await;
    assert_eq!(v.status, 200, "{}", v.body);
    assert_eq!(v.body["data"]["valid"], false);
    assert_eq!(v.body["data"]["reason"], "wrong_audience");
    let r = send(
        home.post("/auth/token")
            .header("x-api-key", key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&envelope(shop.tenant.merchant_id)),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.code(), "INVALID_API_KEY");

    // And a home key is not the c7 cell's.
    let home_shop = Shop::open(&home).await;
    assert_eq!(cells::cell_of_key(&home_shop.tenant.platform_key), None);
    let v = send(c7.get("/auth/token/validate").bearer_auth(&home_shop.token)).await;
    assert_eq!(v.body["data"]["reason"], "wrong_audience");
    home.stop().await;
    c7.stop().await;
}
