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

/// The audited actions on `targets`, newest first.
async fn audited(app: &TestApp, key: &str, targets: &[String]) -> Vec<String> {
    let log = send(
        app.get("/operator/audit-log?limit=200")
            .header("x-operator-key", key),
    )
    .await;
    assert_eq!(log.status, 200, "{}", log.body);
    log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| targets.iter().any(|t| e["target_id"] == t.as_str()))
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect()
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
    api::store::queues::dead_letters::insert_once(
        &app.server.state.db,
        api::store::queues::dead_letters::NewDeadLetter {
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
    let all = api::store::queues::dead_letters::list(
        &app.server.state.db,
        &Default::default(),
        None,
        10_000,
    )
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

    let actions = audited(&app, &ops, &[a.to_string(), b.to_string()]).await;
    assert_eq!(actions.len(), 2, "{actions:?}");
    // Partners never reach these routes.
    let r = send(
        app.get("/operator/dead-letters")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn a_bulk_action_over_http_dry_runs_then_reaches_every_match_and_is_audited_whole() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let t = app.tenant(true).await;
    let letters = tests::dead_letters::many(&app, &t, 3, "receiver timeout").await;
    // Replayed jobs of these made-up payloads fail again when some worker of the run takes
    // them, and come back as new letters of this merchant: assertions name letters by id.
    let others = tests::dead_letters::many(&app, &t, 2, "bad certificate").await;
    let statuses = |ids: Vec<uuid::Uuid>| {
        let app = &app;
        async move {
            let mut v = vec![];
            for id in ids {
                v.push(tests::dead_letters::status_of(app, id).await);
            }
            v
        }
    };
    let bulk = |what: &str, body: serde_json::Value| {
        send(
            app.post(&format!("/operator/dead-letters/bulk/{what}"))
                .header("x-operator-key", &ops)
                .json(&body),
        )
    };
    let filter =
        json!({"merchant_id": t.merchant_id, "queue": "webhook_batch", "error": "TIMEOUT"});

    let dry = bulk(
        "replay",
        json!({"filter": filter, "reason": "INC-7 receiver back", "dry_run": true}),
    )
    .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert_eq!(dry.body["data"]["dry_run"], true);
    assert_eq!(dry.body["data"]["matched"], 3);
    assert_eq!(dry.body["data"]["changed"], 0);
    assert!(
        dry.body["data"]["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["outcome"] == "would_replay")
    );
    for id in &letters {
        assert_eq!(
            tests::dead_letters::status_of(&app, *id).await,
            "dead",
            "a dry run changes nothing"
        );
    }

    let done = bulk(
        "replay",
        json!({"filter": filter, "reason": "INC-7 receiver back"}),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.body["data"]["matched"], 3);
    assert_eq!(done.body["data"]["changed"], 3);
    for id in &letters {
        assert_eq!(tests::dead_letters::status_of(&app, *id).await, "replayed");
    }
    assert_eq!(
        statuses(others.clone()).await,
        ["dead", "dead"],
        "outside the filter"
    );
    let again = bulk("replay", json!({"filter": filter, "reason": "again"})).await;
    assert_eq!(
        again.body["data"]["matched"], 0,
        "replayed letters are no longer dead"
    );

    let log = send(
        app.get("/operator/audit-log?action=dead_letter.bulk_replay&limit=200")
            .header("x-operator-key", &ops),
    )
    .await;
    let mine: Vec<_> = log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["details"]["filter"]["merchant"] == t.merchant_id.to_string())
        .collect();
    assert_eq!(mine.len(), 2, "each finished bulk action once: {mine:?}");
    assert_eq!(mine[1]["reason"], "INC-7 receiver back");
    assert_eq!(mine[1]["details"]["summary"]["changed"], 3);

    // Bad input changes nothing and says which field and what is allowed.
    let bad = bulk(
        "purge",
        json!({"filter": {"queue": "emails", "merchant_id": t.merchant_id}, "reason": "x"}),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    bad.assert_field_error("/filter/queue");
    let no_filter = bulk("purge", json!({"reason": "everything?"})).await;
    assert_eq!(
        no_filter.status, 400,
        "every letter must be asked for with filter {{}}"
    );
    no_filter.assert_field_error("/filter");
    let no_reason = bulk("purge", json!({"filter": {"merchant_id": t.merchant_id}})).await;
    assert_eq!(no_reason.status, 400);
    no_reason.assert_field_error("/reason");
    assert_eq!(statuses(others.clone()).await, ["dead", "dead"]);
    // The rest, purged for good.
    let purged = bulk(
        "purge",
        json!({"filter": {"merchant_id": t.merchant_id, "error": "certificate"}, "reason": "receiver retired"}),
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    assert_eq!(purged.body["data"]["changed"], 2);
    assert_eq!(purged.body["data"]["dead_letters"][0]["outcome"], "purged");
    assert_eq!(statuses(others).await, ["purged", "purged"]);
    // And a partner key is no operator key.
    let partner = send(
        app.post("/operator/dead-letters/bulk/purge")
            .header("x-api-key", &t.platform_key)
            .json(&json!({"reason": "x"})),
    )
    .await;
    assert_eq!(partner.status, 401);
}

#[tokio::test]
async fn an_operator_re_enables_any_tenants_disabled_endpoint_and_recovers_its_deliveries() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let shop = tests::shop::Shop::open(&app).await;
    let r = shop
        .control(
            "/webhooks/subscriptions",
            json!({"url": "https://pos.example.com/hooks", "description": "till events"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sub = r.body["data"]["subscription"]["subscription_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = shop
        .control(&format!("/webhooks/subscriptions/{sub}/disable"), json!({}))
        .await;
    assert_eq!(r.body["data"]["state"], "DISABLED", "{}", r.body);

    let call = |what: &str, body: serde_json::Value| {
        send(
            app.post(&format!("/operator/webhook-endpoints/{sub}/{what}"))
                .header("x-operator-key", &ops)
                .json(&body),
        )
    };
    let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let preview = call(
        "recover",
        json!({"since": since, "reason": "INC-9", "dry_run": true}),
    )
    .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert_eq!(preview.body["data"]["dry_run"], true);
    assert_eq!(preview.body["data"]["deliveries"], 0);

    let enabled = call(
        "enable",
        json!({"reason": "receiver fixed, INC-9", "replay_missed": true}),
    )
    .await;
    assert_eq!(enabled.status, 200, "{}", enabled.body);
    assert_eq!(enabled.body["data"]["state"], "ACTIVE");
    assert_eq!(enabled.body["data"]["missed"], 0);
    let seen = api::store::webhooks::find_subscription(&app.server.state.db, sub.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((seen.state.as_str(), seen.failure_streak), ("ACTIVE", 0));

    let recovered = call("recover", json!({"since": since, "reason": "INC-9"})).await;
    assert_eq!(recovered.status, 200, "{}", recovered.body);
    assert_eq!(recovered.body["data"]["dry_run"], false);

    let log = send(
        app.get(&format!("/operator/audit-log?target_id={sub}"))
            .header("x-operator-key", &ops),
    )
    .await;
    let actions: Vec<&str> = log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["webhook_endpoint.recover", "webhook_endpoint.enable"]
    );

    let unknown = send(
        app.post(&format!(
            "/operator/webhook-endpoints/{}/enable",
            uuid::Uuid::now_v7()
        ))
        .header("x-operator-key", &ops)
        .json(&json!({"reason": "x"})),
    )
    .await;
    assert_eq!(unknown.status, 404);
    let bad = call("recover", json!({"since": "yesterday", "reason": "x"})).await;
    assert_eq!(bad.status, 400);
    bad.assert_field_error("/since");
}

/// "Operator mutations accept an optional Idempotency-Key and replay as partner ones do"
/// (issue 46): a retry of a suspension replays its answer and changes nothing, even after
/// the integration was reactivated in between; the same key with another body is refused.
#[tokio::test]
async fn an_operator_action_with_an_idempotency_key_replays_its_first_answer_and_acts_once() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let t = app.tenant(true).await;
    let integration = t.integration_id.to_string();
    let key = uuid::Uuid::new_v4().to_string();
    let suspend = |reason: &'static str| {
        send(
            app.post(&format!("/operator/integrations/{integration}/suspend"))
                .header("x-operator-key", &ops)
                .header("Idempotency-Key", &key)
                .json(&json!({"reason": reason})),
        )
    };

    let first = suspend("fraud ticket 7").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["data"]["status"], "SUSPENDED");
    assert_eq!(first.body["meta"]["idempotency_replayed"], false);
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 401);

    let r = act(&app, &ops, &integration, "reactivate", "cleared").await;
    assert_eq!(r.body["data"]["status"], "ACTIVE", "{}", r.body);
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);

    let retry = suspend("fraud ticket 7").await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(retry.body["meta"]["idempotency_replayed"], true);
    let mut unmarked = retry.body.clone();
    unmarked["meta"]["idempotency_replayed"] = json!(false);
    assert_eq!(unmarked, first.body, "the first answer, replayed");
    assert_eq!(
        tests::key_works(&app, &t.platform_key).await,
        200,
        "a replay suspends nothing and publishes nothing"
    );

    let reused = suspend("another ticket").await;
    assert_eq!(
        (reused.status, reused.code()),
        (422, "IDEMPOTENCY_KEY_REUSED"),
        "{}",
        reused.body
    );
    let malformed = send(
        app.post(&format!("/operator/integrations/{integration}/suspend"))
            .header("x-operator-key", &ops)
            .header("Idempotency-Key", "not-a-uuid")
            .json(&json!({"reason": "x"})),
    )
    .await;
    assert_eq!(malformed.status, 400, "{}", malformed.body);
    malformed.assert_field_error("header:Idempotency-Key");
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);

    let actions = audited(&app, &ops, std::slice::from_ref(&integration)).await;
    assert_eq!(
        actions,
        ["integration.reactivate", "integration.suspend"],
        "one suspension, audited once"
    );
}

/// A bulk action retried with its key answers what it did the first time instead of acting
/// on whatever matches now; without a key, the same request acts again.
#[tokio::test]
async fn a_bulk_purge_retried_with_its_key_replays_instead_of_reaching_new_letters() {
    let app = TestApp::spawn().await;
    let ops = operator_key(&app).await;
    let t = app.tenant(true).await;
    let first_batch = tests::dead_letters::many(&app, &t, 2, "gone for good").await;
    let key = uuid::Uuid::new_v4().to_string();
    let body = json!({"filter": {"merchant_id": t.merchant_id, "error": "gone for good"}, "reason": "receiver retired"});
    let purge = |key: Option<&str>| {
        let mut r = app
            .post("/operator/dead-letters/bulk/purge")
            .header("x-operator-key", &ops);
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        send(r.json(&body))
    };

    let first = purge(Some(&key)).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["data"]["changed"], 2);
    let later = tests::dead_letters::many(&app, &t, 1, "gone for good").await;

    let retry = purge(Some(&key)).await;
    assert_eq!(retry.body["meta"]["idempotency_replayed"], true);
    assert_eq!(retry.body["data"], first.body["data"]);
    assert_eq!(
        tests::dead_letters::status_of(&app, later[0]).await,
        "dead",
        "the replay reached nothing"
    );
    for id in &first_batch {
        assert_eq!(tests::dead_letters::status_of(&app, *id).await, "purged");
    }

    let unkeyed = purge(None).await;
    assert_eq!(unkeyed.body["data"]["changed"], 1, "{}", unkeyed.body);
    assert_eq!(
        tests::dead_letters::status_of(&app, later[0]).await,
        "purged"
    );
}
