//! The operator credential and what operators do to tenants.
use serde_json::json;
use tests::{Reply, TestApp, send};

async fn operator_key(app: &TestApp) -> String {
    api::domain::operators::create(
        &app.server.state.db,
        "ops on call",
        app.server.state.config.bcrypt_cost,
    )
    .await
    .unwrap()
    .operator_key
}

async fn act(app: &TestApp, key: &str, integration: &str, what: &str, reason: &str) -> Reply {
    send(
        app.post(&format!("/operator/integrations/{integration}/{what}"))
            .header("x-operator-key", key)
            .json(&json!({"reason": reason})),
    )
    .await
}

#[tokio::test]
async fn a_suspended_integrations_keys_fail_at_once_and_work_again_after_reactivation() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let t = app.tenant(true).await;
    let bystander = app.tenant(true).await;
    assert_eq!(
        tests::key_works(&app, &t.platform_key).await,
        200,
        "verified and cached"
    );

    let r = act(
        &app,
        &ops,
        &t.integration_id.to_string(),
        "suspend",
        "chargeback fraud ticket 42",
    )
    .await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["status"], "SUSPENDED");
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 401);
    assert_eq!(tests::key_works(&app, &bystander.platform_key).await, 200);

    let r = act(
        &app,
        &ops,
        &t.integration_id.to_string(),
        "reactivate",
        "resolved",
    )
    .await;
    assert_eq!(r.body["data"]["status"], "ACTIVE");
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);

    let log = send(
        app.get("/operator/audit-log?limit=200")
            .header("x-operator-key", &ops),
    )
    .await;
    assert_eq!(log.status, 200, "{}", log.body);
    let entries: Vec<_> = log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target_id"] == t.integration_id.to_string())
        .collect();
    assert_eq!(entries.len(), 2, "both actions are audited");
    assert_eq!(entries[0]["action"], "integration.reactivate");
    assert_eq!(entries[1]["action"], "integration.suspend");
    assert_eq!(entries[1]["reason"], "chargeback fraud ticket 42");
    assert!(
        entries[1]["actor"]
            .as_str()
            .unwrap()
            .contains("ops on call")
    );
}

#[tokio::test]
async fn operator_and_partner_credentials_never_stand_in_for_each_other() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let t = app.tenant(true).await;
    // A partner key on an operator route, in either header.
    let r = act(
        &app,
        &t.platform_key,
        &t.integration_id.to_string(),
        "suspend",
        "x",
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "INVALID_API_KEY");
    let r = send(
        app.get("/operator/audit-log")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(r.status, 401);
    // An operator key on a partner route.
    assert_eq!(tests::key_works(&app, &ops).await, 401);
    // The operator key is stored only as a hash.
    let dump = tests::dump_database(&app.server.state.db).await;
    assert!(!dump.contains(&ops));
}

#[tokio::test]
async fn an_operator_action_needs_a_reason_and_a_real_integration() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let t = app.tenant(true).await;
    let r = act(&app, &ops, &t.integration_id.to_string(), "suspend", "").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.field_issues()[0].0, "/reason");
    let r = act(
        &app,
        &ops,
        &uuid::Uuid::now_v7().to_string(),
        "suspend",
        "why",
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        tests::key_works(&app, &t.platform_key).await,
        200,
        "nothing changed"
    );
}

async fn dead_letter(app: &TestApp, t: &tests::TestTenant) -> uuid::Uuid {
    let job_id = uuid::Uuid::now_v7();
    api::store::dead_letters::insert_once(
        &app.server.state.db,
        api::store::dead_letters::NewDeadLetter {
            job_id,
            queue: "sms_send",
            job_type: "sms_send",
            merchant_id: Some(t.merchant_id),
            payload: json!({"opaque": true}),
            attempts: 8,
            error_history: json!([{"attempt": 8, "error": "provider 503"}]),
            last_error: "provider 503",
            first_enqueued_at: chrono::Utc::now(),
            dead_at: chrono::Utc::now(),
        },
    )
    .await
    .unwrap();
    let all =
        api::store::dead_letters::list(&app.server.state.db, &Default::default(), None, 10_000)
            .await
            .unwrap();
    all.into_iter().find(|d| d.job_id == job_id).unwrap().id
}

#[tokio::test]
async fn operators_list_show_replay_and_purge_dead_letters_over_http() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let t = app.tenant(true).await;
    let a = dead_letter(&app, &t).await;
    let b = dead_letter(&app, &t).await;

    let list = send(
        app.get(&format!(
            "/operator/dead-letters?merchant_id={}&error=503",
            t.merchant_id
        ))
        .header("x-operator-key", &ops),
    )
    .await;
    list.assert_envelope();
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2);
    let one = send(
        app.get(&format!("/operator/dead-letters/{a}"))
            .header("x-operator-key", &ops),
    )
    .await;
    assert_eq!(
        one.body["data"]["error_history"][0]["error"],
        "provider 503"
    );

    let replay = |id: uuid::Uuid| {
        send(
            app.post(&format!("/operator/dead-letters/{id}/replay"))
                .header("x-operator-key", &ops),
        )
    };
    let r = replay(a).await;
    assert_eq!(r.body["data"]["outcome"], "replayed", "{}", r.body);
    assert!(r.body["data"]["new_job_id"].is_string());
    assert_eq!(
        replay(a).await.body["data"]["outcome"],
        "unchanged",
        "a second replay enqueues nothing"
    );

    let purge = send(
        app.post(&format!("/operator/dead-letters/{b}/purge"))
            .header("x-operator-key", &ops)
            .json(&json!({"reason": ""})),
    )
    .await;
    assert_eq!(purge.status, 400, "a purge needs a reason");
    let purge = send(
        app.post(&format!("/operator/dead-letters/{b}/purge"))
            .header("x-operator-key", &ops)
            .json(&json!({"reason": "number ported"})),
    )
    .await;
    assert_eq!(purge.body["data"]["outcome"], "purged");
    assert_eq!(replay(b).await.body["data"]["outcome"], "unchanged");

    let log = send(
        app.get("/operator/audit-log?limit=200")
            .header("x-operator-key", &ops),
    )
    .await;
    let actions: Vec<&str> = log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target_id"] == a.to_string() || e["target_id"] == b.to_string())
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions.len(), 2, "{actions:?}");
    // Partners never reach these routes.
    let r = send(
        app.get("/operator/dead-letters")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(r.status, 401);
}
