//! Key lifecycle: create, list, revoke, regenerate, delete.
use std::time::Duration;

use serde_json::{Value, json};
use tests::{Reply, TestApp, TestTenant, send};
use uuid::Uuid;

pub fn envelope(t: &TestTenant) -> Value {
    json!({
        "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
        "context": {"merchant_id": t.merchant_id.to_string()},
    })
}

pub async fn create(app: &TestApp, key: &str, t: &TestTenant, extra: Value) -> Reply {
    let mut body = envelope(t);
    body["enterprise_id"] = json!(t.merchant_id.to_string());
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    send(
        app.post("/auth/keys")
            .header("x-api-key", key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await
}

async fn action(app: &TestApp, key: &str, t: &TestTenant, key_id: &str, what: &str) -> Reply {
    let mut body = envelope(t);
    body["reason"] = json!(format!("test {what}"));
    send(
        app.post(&format!("/auth/keys/{key_id}/{what}"))
            .header("x-api-key", key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await
}

#[tokio::test]
async fn a_created_key_has_the_documented_form_and_only_its_hash_is_stored() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let r = create(&app, &t.platform_key, &t, json!({"label": "till"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    let raw = d["raw_key"].as_str().unwrap();
    let (prefix, random) = raw
        .rsplit_once('_')
        .map(|(p, _)| (p, &raw[raw.len() - 32..]))
        .unwrap();
    assert!(prefix.starts_with("wk_"), "{raw}");
    assert_eq!(random.len(), 32, "24 random bytes in base64url");
    assert!(
        random
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert!(raw.starts_with(d["key_prefix"].as_str().unwrap()));
    assert_eq!(&raw[raw.len() - 4..], d["key_last_four"].as_str().unwrap());
    assert_eq!(d["scope"], "enterprise");
    assert_eq!(d["status"], "active");
    assert_eq!(d["is_sandbox"], true);

    use sea_orm::EntityTrait;
    let row = entities::api_key::Entity::find_by_id(
        Uuid::parse_str(d["key_id"].as_str().unwrap()).unwrap(),
    )
    .one(&app.server.state.db)
    .await
    .unwrap()
    .unwrap();
    assert!(
        row.key_hash.starts_with("$2"),
        "a bcrypt hash: {}",
        row.key_hash
    );
    assert!(bcrypt::verify(raw, &row.key_hash).unwrap());

    // Replay the create too, so the stored replay is in the database when we look.
    let dump = tests::dump_database(&app.server.state.db).await;
    for secret in [raw, t.platform_key.as_str()] {
        assert!(!dump.contains(secret), "a raw key is stored in plaintext");
    }
}

#[tokio::test]
async fn list_shows_metadata_only_with_filters_and_cursor_pagination() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    for i in 0..3 {
        let r = create(&app, &t.platform_key, &t, json!({"brand_id": t.brand_id.to_string(), "branch_id": t.branch_ids[i % 2].to_string(), "label": format!("k{i}")})).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let page1 = send(
        app.get("/auth/keys?limit=2")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    page1.assert_envelope();
    assert_eq!(page1.status, 200, "{}", page1.body);
    let items = page1.body["data"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(page1.body["meta"]["has_more"], true);
    assert!(items.iter().all(|k| k.get("raw_key").is_none()));
    let cursor = page1.body["meta"]["next_cursor"].as_str().unwrap();
    let page2 = send(
        app.get(&format!("/auth/keys?limit=2&cursor={cursor}"))
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(
        page2.body["data"].as_array().unwrap().len(),
        2,
        "4 keys in all: platform + 3"
    );
    assert_eq!(page2.body["meta"]["has_more"], false);
    assert_eq!(page2.body["meta"]["next_cursor"], Value::Null);

    let by_branch = send(
        app.get(&format!("/auth/keys?branch_id={}", t.branch_ids[1]))
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(by_branch.body["data"].as_array().unwrap().len(), 1);

    for bad in [
        "limit=0",
        "limit=201",
        "status=gone",
        "branch_id=nope",
        "cursor=%21%21",
    ] {
        let r = send(
            app.get(&format!("/auth/keys?{bad}"))
                .header("x-api-key", &t.platform_key),
        )
        .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert_eq!(r.code(), "VALIDATION_ERROR");
    }
    // Another integration sees none of them.
    let other = app.tenant(true).await;
    let r = send(
        app.get("/auth/keys")
            .header("x-api-key", &other.platform_key),
    )
    .await;
    assert_eq!(
        r.body["data"].as_array().unwrap().len(),
        1,
        "only its own platform key"
    );
}

#[tokio::test]
async fn revoke_takes_effect_at_once_on_another_api_instance_and_again_is_a_no_op() {
    let a = TestApp::spawn().await;
    let b = TestApp::spawn().await;
    let t = a.tenant(true).await;
    let made = create(&a, &t.platform_key, &t, json!({})).await;
    let key_id = made.body["data"]["key_id"].as_str().unwrap().to_string();
    let raw = made.body["data"]["raw_key"].as_str().unwrap().to_string();
    // Both instances have verified (and cached) the key.
    assert_eq!(tests::key_works(&a, &raw).await, 200);
    assert_eq!(tests::key_works(&b, &raw).await, 200);

    let r = action(&a, &t.platform_key, &t, &key_id, "revoke").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["status"], "inactive");
    let revoked_at = r.body["data"]["revoked_at"].clone();
    assert!(revoked_at.is_string());

    // The very next request on the other instance is refused.
    assert_eq!(tests::key_works(&b, &raw).await, 401);
    assert_eq!(tests::key_works(&a, &raw).await, 401);

    let again = action(&a, &t.platform_key, &t, &key_id, "revoke").await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["data"]["status"], "inactive");
    assert_eq!(again.body["data"]["revoked_at"], revoked_at);
}

#[tokio::test]
async fn regenerate_issues_a_new_key_with_the_same_scope_and_the_old_one_fails_at_once() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let made = create(
        &app,
        &t.platform_key,
        &t,
        json!({"brand_id": t.brand_id.to_string(), "label": "pos"}),
    )
    .await;
    let old_id = made.body["data"]["key_id"].as_str().unwrap().to_string();
    let old_raw = made.body["data"]["raw_key"].as_str().unwrap().to_string();
    assert_eq!(tests::key_works(&app, &old_raw).await, 200);

    let r = action(&app, &t.platform_key, &t, &old_id, "regenerate").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["previous_key_id"], old_id.as_str());
    assert_eq!(d["scope"], "brand");
    assert_eq!(d["brand_id"], t.brand_id.to_string());
    assert_eq!(d["label"], "pos");
    let new_raw = d["raw_key"].as_str().unwrap();
    assert_ne!(new_raw, old_raw);
    assert_eq!(tests::key_works(&app, &old_raw).await, 401);
    assert_eq!(tests::key_works(&app, new_raw).await, 200);
    // An inactive key cannot be regenerated.
    let r = action(&app, &t.platform_key, &t, &old_id, "regenerate").await;
    assert_eq!(r.status, 400, "{}", r.body);
}

#[tokio::test]
async fn delete_removes_a_key_and_unknown_or_foreign_ids_are_not_found() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let other = app.tenant(true).await;
    let made = create(&app, &t.platform_key, &t, json!({})).await;
    let key_id = made.body["data"]["key_id"].as_str().unwrap().to_string();
    let raw = made.body["data"]["raw_key"].as_str().unwrap().to_string();

    // Another integration's caller: the same answer as for an id that does not exist.
    let foreign = action(&app, &other.platform_key, &other, &key_id, "delete").await;
    let unknown = action(
        &app,
        &other.platform_key,
        &other,
        &Uuid::now_v7().to_string(),
        "delete",
    )
    .await;
    assert_eq!(foreign.status, 404);
    assert_eq!(unknown.status, 404);
    assert_eq!(
        foreign.body["error"], unknown.body["error"],
        "no difference reveals the key exists"
    );

    let r = action(&app, &t.platform_key, &t, &key_id, "delete").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["status"], "deleted");
    assert!(r.body["data"]["deleted_at"].is_string());
    assert_eq!(tests::key_works(&app, &raw).await, 401);
    assert_eq!(
        action(&app, &t.platform_key, &t, &key_id, "delete")
            .await
            .status,
        404
    );
    let r = action(&app, &t.platform_key, &t, "not-a-uuid", "revoke").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.field_issues()[0].0, "path:keyId");
}

#[tokio::test]
async fn an_expired_key_is_invalid() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let at = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let made = create(&app, &t.platform_key, &t, json!({"expires_at": at})).await;
    assert_eq!(made.status, 200, "{}", made.body);
    let raw = made.body["data"]["raw_key"].as_str().unwrap().to_string();
    assert_eq!(tests::key_works(&app, &raw).await, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(tests::key_works(&app, &raw).await, 401);
}

#[tokio::test]
async fn a_revoke_racing_a_regenerate_leaves_the_old_key_inactive_and_at_most_one_successor() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    for round in 0..8 {
        let made = create(&app, &t.platform_key, &t, json!({})).await;
        let key_id = made.body["data"]["key_id"].as_str().unwrap().to_string();
        let (revoked, regenerated) = tokio::join!(
            action(&app, &t.platform_key, &t, &key_id, "revoke"),
            action(&app, &t.platform_key, &t, &key_id, "regenerate"),
        );
        for r in [&revoked, &regenerated] {
            assert!(
                [200, 400, 409].contains(&r.status),
                "round {round}: {}",
                r.body
            );
        }
        let id = Uuid::parse_str(&key_id).unwrap();
        let db = &app.server.state.db;
        let old = entities::api_key::Entity::find_by_id(id)
            .one(db)
            .await
            .unwrap()
            .unwrap();
        let successors = entities::api_key::Entity::find()
            .filter(entities::api_key::Column::PreviousKeyId.eq(id))
            .all(db)
            .await
            .unwrap();
        assert_eq!(old.status.as_str(), "inactive", "round {round}");
        assert!(
            successors.len() <= 1,
            "round {round}: one successor at most"
        );
        // The transition that moved the old key is the one its reason names: a revoke that
        // moved it leaves no successor, a regenerate that moved it leaves exactly one.
        if old.status_reason.as_deref() == Some("test revoke") {
            assert!(
                successors.is_empty(),
                "round {round}: a successor outlived a winning revoke"
            );
        } else {
            assert_eq!(
                successors.len(),
                1,
                "round {round}: the regenerate won and issued one key"
            );
            assert_eq!(regenerated.status, 200);
        }
    }
}

/// "A branch_id outside the caller's scope returns FORBIDDEN (403)": a brand or branch of
/// another tenant and an id that exists nowhere get the same answer, so the refusal does
/// not tell whether a foreign id exists. Nothing is created.
#[tokio::test]
async fn a_brand_or_branch_outside_the_callers_scope_is_forbidden_whether_or_not_it_exists() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let other = app.tenant(true).await;
    let brand = t.brand_id.to_string();
    let cases = [
        (
            "another tenant's brand",
            json!({"brand_id": other.brand_id.to_string()}),
        ),
        (
            "a brand that exists nowhere",
            json!({"brand_id": Uuid::now_v7().to_string()}),
        ),
        (
            "another tenant's branch",
            json!({"brand_id": brand, "branch_id": other.branch_ids[0].to_string()}),
        ),
        (
            "a branch that exists nowhere",
            json!({"brand_id": brand, "branch_id": Uuid::now_v7().to_string()}),
        ),
        (
            "another tenant's brand and branch",
            json!({"brand_id": other.brand_id.to_string(), "branch_id": other.branch_ids[0].to_string()}),
        ),
        // The scope rule comes before the rule that a branch names its brand.
        (
            "another tenant's branch without a brand",
            json!({"branch_id": other.branch_ids[0].to_string()}),
        ),
        (
            "a branch that exists nowhere, without a brand",
            json!({"branch_id": Uuid::now_v7().to_string()}),
        ),
    ];
    let mut answers = Vec::new();
    for (what, extra) in cases {
        let r = create(&app, &t.platform_key, &t, extra).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (403, "FORBIDDEN"),
            "{what}: {}",
            r.body
        );
        answers.push((what, r.body["error"].clone()));
    }
    for (what, error) in &answers[1..] {
        assert_eq!(error, &answers[0].1, "{what} answers like {}", answers[0].0);
    }
    // Another merchant's enterprise is FORBIDDEN before any check that enterprise_id
    // matches context.merchant_id, whatever else the body names.
    let foreign = other.merchant_id.to_string();
    for (what, extra) in [
        ("alone", json!({"enterprise_id": foreign})),
        (
            "with its brand and branch",
            json!({"enterprise_id": foreign, "brand_id": other.brand_id.to_string(), "branch_id": other.branch_ids[0].to_string()}),
        ),
        (
            "with its branch and no brand",
            json!({"enterprise_id": foreign, "branch_id": other.branch_ids[0].to_string()}),
        ),
        (
            "with this tenant's own brand",
            json!({"enterprise_id": foreign, "brand_id": brand}),
        ),
    ] {
        let r = create(&app, &t.platform_key, &t, extra).await;
        assert_eq!(
            (r.status, r.code()),
            (403, "FORBIDDEN"),
            "another merchant's enterprise {what}: {}",
            r.body
        );
    }
    // Within scope, a branch without its brand is the body's own fault.
    let r = create(
        &app,
        &t.platform_key,
        &t,
        json!({"branch_id": t.branch_ids[0].to_string()}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.field_issues(),
        vec![("/brand_id".to_string(), "required".to_string())]
    );
    let list = send(app.get("/auth/keys").header("x-api-key", &t.platform_key)).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(
        list.body["data"].as_array().unwrap().len(),
        1,
        "only the platform key: {}",
        list.body
    );
}
