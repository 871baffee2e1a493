//! Key permissions (issue 26): the spec gives each key route a permission ("integrations
//! CREATE / READ / UPDATE / DELETE"); every other x-api-key operation has one too,
//! published as `x-permission`. A key's permissions are chosen at creation and only
//! narrow; a call without the permission is 403 FORBIDDEN naming it.
use serde_json::{Value, json};
use tests::{Reply, TestApp, TestTenant, send};

use super::keys::{create, envelope};
use uuid::Uuid;

/// A key minted by the platform key with `permissions` (None: the default); its raw key.
async fn key_with(app: &TestApp, t: &TestTenant, permissions: Option<&[&str]>) -> (String, String) {
    let extra = match permissions {
        Some(ps) => json!({"permissions": ps}),
        None => json!({}),
    };
    let r = create(app, &t.platform_key, t, extra).await;
    assert_eq!(r.status, 200, "{}", r.body);
    (
        r.body["data"]["key_id"].as_str().unwrap().to_string(),
        r.body["data"]["raw_key"].as_str().unwrap().to_string(),
    )
}

async fn action(
    app: &TestApp,
    key: &str,
    t: &TestTenant,
    id: &str,
    what: &str,
    extra: Value,
) -> Reply {
    let mut body = envelope(t);
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    send(
        app.post(&format!("/auth/keys/{id}/{what}"))
            .header("x-api-key", key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await
}

fn assert_missing(r: &Reply, permissions: &[&str]) {
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["missing_permissions"],
        json!(permissions),
        "{}",
        r.body
    );
}

const EVERY: &[&str] = &[
    "integrations:create",
    "integrations:read",
    "integrations:update",
    "integrations:delete",
    "terminal",
    "reporting",
    "settlements",
    "catalog",
    "incentives",
    "webhooks",
    "corrections",
    "risk",
];

/// "Per-merchant keys minted without an explicit set get the terminal and reporting
/// permissions, not key management": such a key runs a till and reads the feed, and a leak
/// of it cannot mint fresh keys.
#[tokio::test]
async fn a_merchant_key_minted_without_a_set_runs_the_till_and_reads_the_feed_but_mints_nothing() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let r = create(&app, &t.platform_key, &t, json!({"label": "till"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"]["permissions"],
        json!(["terminal", "reporting"])
    );
    let raw = r.body["data"]["raw_key"].as_str().unwrap().to_string();

    assert_missing(
        &create(&app, &raw, &t, json!({})).await,
        &["integrations:create"],
    );
    let list = send(app.get("/auth/keys").header("x-api-key", &raw)).await;
    assert_missing(&list, &["integrations:read"]);

    let token = send(
        app.post("/auth/token")
            .header("x-api-key", &raw)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&envelope(&t)),
    )
    .await;
    assert_eq!(token.status, 200, "{}", token.body);
    let feed = send(
        app.get(&format!("/{}/transactions", t.integration_id))
            .header("x-api-key", &raw),
    )
    .await;
    assert_eq!(feed.status, 200, "{}", feed.body);

    // The caller sees its own permissions, and only the operations they allow.
    let caps = send(app.get("/capabilities").header("x-api-key", &raw)).await;
    assert_eq!(caps.status, 200, "{}", caps.body);
    assert_eq!(
        caps.body["data"]["credential"]["permissions"],
        json!(["terminal", "reporting"])
    );
    let ops: Vec<&str> = caps.body["data"]["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["operation_id"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"listTransactions") && ops.contains(&"exchangeTerminalToken"));
    assert!(
        !ops.contains(&"createApiKey") && !ops.contains(&"ingestSettlement"),
        "{ops:?}"
    );
    let platform = send(
        app.get("/capabilities")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(
        platform.body["data"]["credential"]["permissions"],
        json!(EVERY)
    );
}

/// "A minted key never gets a permission, or a scope, that its creator lacks."
#[tokio::test]
async fn a_minted_key_never_gets_a_permission_its_creator_lacks() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let (_, minter) = key_with(&app, &t, Some(&["integrations:create", "terminal"])).await;

    let wider = create(
        &app,
        &minter,
        &t,
        json!({"permissions": ["terminal", "reporting", "webhooks"]}),
    )
    .await;
    assert_missing(&wider, &["reporting", "webhooks"]);
    // Its default is the merchant default as far as the minter holds it.
    let default = create(&app, &minter, &t, json!({})).await;
    assert_eq!(default.status, 200, "{}", default.body);
    assert_eq!(default.body["data"]["permissions"], json!(["terminal"]));
    let same = create(
        &app,
        &minter,
        &t,
        json!({"permissions": ["integrations:create"]}),
    )
    .await;
    assert_eq!(same.status, 200, "{}", same.body);
    assert_eq!(
        same.body["data"]["permissions"],
        json!(["integrations:create"])
    );

    // Unknown names and an empty set are the caller's mistakes, named by field.
    let r = create(
        &app,
        &t.platform_key,
        &t,
        json!({"permissions": ["terminal", "root"]}),
    )
    .await;
    r.assert_field_error("/permissions/1");
    let r = create(&app, &t.platform_key, &t, json!({"permissions": []})).await;
    r.assert_field_error("/permissions");
}

/// A key may revoke, regenerate or delete only a key holding nothing it lacks: regenerating
/// a wider key would hand its caller a raw key worth more than its own.
#[tokio::test]
async fn a_key_manages_only_keys_no_wider_than_itself() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let (_, manager) = key_with(
        &app,
        &t,
        Some(&["integrations:read", "integrations:update", "terminal"]),
    )
    .await;
    let (till, _) = key_with(&app, &t, Some(&["terminal"])).await;
    let (feed, _) = key_with(&app, &t, Some(&["reporting"])).await;

    let r = action(&app, &manager, &t, &feed, "regenerate", json!({})).await;
    assert_missing(&r, &["reporting"]);
    let r = action(&app, &manager, &t, &feed, "revoke", json!({})).await;
    assert_missing(&r, &["reporting"]);
    let r = action(&app, &manager, &t, &till, "delete", json!({})).await;
    assert_missing(&r, &["integrations:delete"]);
    let r = action(&app, &manager, &t, &till, "regenerate", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"]["permissions"],
        json!(["terminal"]),
        "the same set"
    );
    let listed = send(app.get("/auth/keys").header("x-api-key", &manager)).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
}

/// Revoking a key leaves the keys it minted working (a platform rotating its own key must
/// not stop every till); the tree is listed with `created_by` and revoked in one call with
/// `cascade`, through a regeneration of a key in it.
#[tokio::test]
async fn revoking_a_key_keeps_what_it_minted_unless_the_tree_is_revoked_with_cascade() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let (parent_id, parent) = key_with(
        &app,
        &t,
        Some(&[
            "integrations:create",
            "integrations:read",
            "integrations:update",
            "terminal",
        ]),
    )
    .await;
    let child = create(
        &app,
        &parent,
        &t,
        json!({"permissions": ["integrations:create", "terminal"]}),
    )
    .await;
    assert_eq!(child.body["data"]["created_by_key_id"], parent_id.as_str());
    let child_id = child.body["data"]["key_id"].as_str().unwrap().to_string();
    let child_raw = child.body["data"]["raw_key"].as_str().unwrap().to_string();
    let grandchild = create(&app, &child_raw, &t, json!({})).await;
    let grandchild_raw = grandchild.body["data"]["raw_key"]
        .as_str()
        .unwrap()
        .to_string();
    let grandchild_id = grandchild.body["data"]["key_id"]
        .as_str()
        .unwrap()
        .to_string();
    let sibling = create(&app, &parent, &t, json!({})).await;
    let sibling_raw = sibling.body["data"]["raw_key"]
        .as_str()
        .unwrap()
        .to_string();
    let sibling_id = sibling.body["data"]["key_id"].as_str().unwrap().to_string();

    let minted = send(
        app.get(&format!("/auth/keys?created_by={parent_id}"))
            .header("x-api-key", &t.platform_key),
    )
    .await;
    let mut ids: Vec<&str> = minted.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut expected = vec![child_id.as_str(), sibling_id.as_str()];
    expected.sort();
    assert_eq!(ids, expected, "the keys it minted, not their children");

    // The parent is regenerated: what it minted stays in its successor's tree.
    let r = action(
        &app,
        &t.platform_key,
        &t,
        &parent_id,
        "regenerate",
        json!({}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let successor = r.body["data"]["key_id"].as_str().unwrap().to_string();
    assert_eq!(
        tests::key_works(&app, &child_raw).await,
        200,
        "a regenerate ends only its key"
    );

    let r = action(&app, &t.platform_key, &t, &sibling_id, "revoke", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["data"].get("cascaded_key_ids").is_none());

    let r = action(
        &app,
        &t.platform_key,
        &t,
        &successor,
        "revoke",
        json!({"cascade": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut cascaded: Vec<&str> = r.body["data"]["cascaded_key_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    cascaded.sort();
    let mut expected = vec![child_id.as_str(), grandchild_id.as_str()];
    expected.sort();
    assert_eq!(cascaded, expected, "the sibling was inactive already");
    for raw in [&child_raw, &grandchild_raw, &sibling_raw] {
        assert_eq!(tests::key_works(&app, raw).await, 401);
    }
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);

    let r = action(
        &app,
        &t.platform_key,
        &t,
        &child_id,
        "delete",
        json!({"cascade": true}),
    )
    .await;
    r.assert_field_error("/cascade");
}

/// Every read an x-api-key may make answers 403 FORBIDDEN naming its `x-permission` to a
/// key holding every other permission (path ids are random: the permission is checked
/// before anything is looked up), and never 403 for that reason to the platform key.
#[tokio::test]
async fn every_x_api_key_read_answers_403_naming_its_permission_to_a_key_without_it() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let doc = send(app.get("/openapi").header("x-api-key", &t.platform_key)).await;
    let doc = if doc.body.get("paths").is_some() {
        doc.body
    } else {
        doc.body["data"].clone()
    };
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let Some(op) = item.get("get") else { continue };
        let Some(permission) = op["x-permission"].as_str() else {
            continue;
        };
        let concrete = path
            .split('/')
            .map(|seg| {
                if seg == "{integration_id}" {
                    t.integration_id.to_string()
                } else if seg.starts_with('{') {
                    Uuid::now_v7().to_string()
                } else {
                    seg.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        let mut concrete = concrete.trim_start_matches("/v1").to_string();
        // A required query parameter is parsed before the handler runs: give it a value.
        let required: Vec<String> = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "query" && p["required"] == true)
            .map(|p| format!("{}=1", p["name"].as_str().unwrap()))
            .collect();
        if !required.is_empty() {
            concrete = format!("{concrete}?{}", required.join("&"));
        }
        let others: Vec<&str> = EVERY.iter().copied().filter(|p| *p != permission).collect();
        let (_, raw) = key_with(&app, &t, Some(&others)).await;
        let r = send(app.get(&concrete).header("x-api-key", &raw)).await;
        assert_missing(&r, &[permission]);
        let r = send(app.get(&concrete).header("x-api-key", &t.platform_key)).await;
        assert!(
            r.body["error"]["details"]["missing_permissions"].is_null(),
            "{concrete}: {}",
            r.body
        );
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} reads carry x-permission");
}

/// Writes are refused for the missing permission too: settlement ingest, SKU registration,
/// a webhook subscription and the token exchange, each with a valid body.
#[tokio::test]
async fn control_plane_writes_need_their_permission() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let (_, till) = key_with(&app, &t, None).await;
    let post = async |path: &str, extra: Value| {
        let mut body = envelope(&t);
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        send(
            app.post(path)
                .header("x-api-key", &till)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(&body),
        )
        .await
    };
    let r = post(
        "/topup/settlements",
        json!({"reference": "ST-1", "amount_minor": 100, "currency": t.currency, "state": "SETTLED"}),
    )
    .await;
    assert_missing(&r, &["settlements"]);
    let r = post(
        "/webhooks/subscriptions",
        json!({"url": "https://example.com/hook", "event_types": ["payment.completed"]}),
    )
    .await;
    assert_missing(&r, &["webhooks"]);

    let (_, reader) = key_with(&app, &t, Some(&["reporting"])).await;
    let token = send(
        app.post("/auth/token")
            .header("x-api-key", &reader)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&envelope(&t)),
    )
    .await;
    assert_missing(&token, &["terminal"]);
}
