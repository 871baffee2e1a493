//! One envelope for every response, including the errors the framework raises by itself.
//! The retry contract of a mutating call is in `retries.rs`.
use serde_json::{Value, json};
use tests::{TestApp, TestTenant, send};
use uuid::Uuid;

pub(super) fn key_body(t: &TestTenant) -> Value {
    json!({
        "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
        "context": {"merchant_id": t.merchant_id.to_string()},
        "enterprise_id": t.merchant_id.to_string(),
        "brand_id": t.brand_id.to_string(),
        "branch_id": t.branch_ids[0].to_string(),
        "label": "till 1",
    })
}

/// `POST /auth/keys` with `key` as the credential and `idem` as the Idempotency-Key.
pub(super) async fn create_key(
    app: &TestApp,
    key: &str,
    idem: impl std::fmt::Display,
    body: &Value,
) -> tests::Reply {
    send(
        app.post("/auth/keys")
            .header("x-api-key", key)
            .header("Idempotency-Key", idem.to_string())
            .json(body),
    )
    .await
}

pub(super) async fn key_count(app: &TestApp, t: &TestTenant) -> usize {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::api_key::Entity::find()
        .filter(entities::api_key::Column::IntegrationId.eq(t.integration_id))
        .all(&app.server.state.db)
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn an_unknown_path_is_not_found_in_the_envelope() {
    let app = TestApp::spawn().await;
    for path in ["/nope", "/v2/health"] {
        let r = send(app.client.get(format!("{}{path}", app.server.url()))).await;
        r.assert_envelope();
        assert_eq!(r.status, 404);
        assert_eq!(r.code(), "NOT_FOUND");
    }
    let r = send(app.get("/no/such/operation")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.code(), "NOT_FOUND");
}

#[tokio::test]
async fn a_wrong_method_is_answered_in_the_envelope() {
    let app = TestApp::spawn().await;
    let r = send(app.client.delete(format!("{}/health", app.url))).await;
    r.assert_envelope();
    assert_eq!(r.status, 405);
    assert_eq!(r.code(), "NOT_FOUND");
}

#[tokio::test]
async fn malformed_and_non_json_bodies_are_validation_errors_that_change_nothing() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let before = key_count(&app, &t).await;
    let cases: Vec<(&str, &str)> = vec![
        ("{not json", "application/json"),
        ("", "application/json"),
        ("[1,2]", "application/json"),
        ("\"text\"", "application/json"),
    ];
    for (body, ct) in cases {
        let r = send(
            app.post("/auth/keys")
                .header("x-api-key", &t.platform_key)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .header("content-type", ct)
                .body(body),
        )
        .await;
        r.assert_envelope();
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.code(), "VALIDATION_ERROR");
        assert!(!r.field_issues().is_empty(), "{}", r.body);
    }
    assert_eq!(key_count(&app, &t).await, before);
}

#[tokio::test]
async fn a_wrong_content_type_is_a_validation_error() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    for ct in [Some("text/plain"), None] {
        let mut req = app
            .post("/auth/keys")
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .body(key_body(&t).to_string());
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let r = send(req).await;
        r.assert_envelope();
        assert_eq!(r.status, 415, "{ct:?}: {}", r.body);
        assert_eq!(r.code(), "VALIDATION_ERROR");
        assert_eq!(r.field_issues()[0].0, "header:Content-Type");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_rejected_in_the_envelope() {
    let app = TestApp::spawn_with(false, |c| c.max_body_bytes = 4096).await;
    let t = app.tenant(true).await;
    let mut body = key_body(&t);
    body["label"] = json!("x".repeat(10_000));
    let r = send(
        app.post("/auth/keys")
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await;
    r.assert_envelope();
    assert_eq!(r.status, 413);
    assert_eq!(r.code(), "VALIDATION_ERROR");
    assert_eq!(
        r.field_issues(),
        vec![("/".to_string(), "too_large".to_string())]
    );
}

#[tokio::test]
async fn a_missing_or_malformed_idempotency_key_is_a_validation_error() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let before = key_count(&app, &t).await;
    for key in [None, Some("not-a-uuid"), Some("")] {
        let mut req = app
            .post("/auth/keys")
            .header("x-api-key", &t.platform_key)
            .json(&key_body(&t));
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        let r = send(req).await;
        r.assert_envelope();
        assert_eq!(r.status, 400, "{key:?}: {}", r.body);
        assert_eq!(r.code(), "VALIDATION_ERROR");
        assert_eq!(r.field_issues()[0].0, "header:Idempotency-Key");
    }
    assert_eq!(key_count(&app, &t).await, before);
}

#[tokio::test]
async fn a_mutation_without_a_supported_api_version_names_the_supported_ones() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    for version in [None, Some("2025-01-01")] {
        let mut body = key_body(&t);
        match version {
            Some(v) => body["meta"]["api_version"] = json!(v),
            None => {
                body["meta"].as_object_mut().unwrap().remove("api_version");
            }
        }
        let r = send(
            app.post("/auth/keys")
                .header("x-api-key", &t.platform_key)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(&body),
        )
        .await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.code(), "VALIDATION_ERROR");
        let field = &r.body["error"]["details"]["fields"][0];
        assert_eq!(field["field"], "/meta/api_version");
        assert!(
            field["message"].as_str().unwrap().contains("2026-06-01"),
            "{field}"
        );
    }
}

#[tokio::test]
async fn field_errors_name_each_bad_field_by_its_json_pointer() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let mut body = key_body(&t);
    body["brand_id"] = json!("not-a-uuid");
    body["label"] = json!("x".repeat(121));
    body["expires_at"] = json!("2001-01-01T00:00:00Z");
    let r = send(
        app.post("/auth/keys")
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let issues = r.field_issues();
    for expected in [
        ("/brand_id", "invalid_uuid"),
        ("/label", "too_long"),
        ("/expires_at", "not_in_future"),
    ] {
        assert!(
            issues.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} not in {issues:?}"
        );
    }
    for f in r.body["error"]["details"]["fields"].as_array().unwrap() {
        assert!(f["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

#[tokio::test]
async fn a_panicking_handler_is_a_500_in_the_envelope_without_its_message() {
    use poem::{Route, endpoint::make_sync, get};
    let app = TestApp::spawn().await;
    let ep = api::http::with_middleware(
        Route::new().at(
            "/boom",
            get(make_sync(|_| -> String { panic!("secret-panic-detail") })),
        ),
        app.server.state.clone(),
        Default::default(),
    );
    let port = tests::serve_endpoint(ep).await;
    let r = send(app.client.get(format!("http://127.0.0.1:{port}/boom"))).await;
    r.assert_envelope();
    assert_eq!(r.status, 500);
    assert_eq!(r.code(), "INTERNAL_SERVER_ERROR");
    assert!(!String::from_utf8_lossy(&r.bytes).contains("secret-panic-detail"));
}
