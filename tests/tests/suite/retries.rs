//! The retry contract of a mutating call: one execution per Idempotency-Key, the stored
//! response replayed byte for byte, and what happens once the record expires.
use serde_json::json;
use tests::{TestApp, TestTenant, send};
use uuid::Uuid;

use super::envelope::{create_key, key_body, key_count};

/// The stored idempotency records of key `idem`, expired or not.
async fn records_of(app: &TestApp, idem: &str) -> Vec<entities::idempotency_record::Model> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::idempotency_record::Entity::find()
        .filter(entities::idempotency_record::Column::IdempotencyKey.eq(idem))
        .all(&app.server.state.db)
        .await
        .unwrap()
}

/// A stored response is the answer to its request for as long as it lives: the retry is
/// not validated again (a field that has gone stale since does not make it an error), it
/// is recognised in another byte form of the same body, a different (valid) body is still
/// refused,
/// and a revoked key gets nothing back.
#[tokio::test]
async fn a_stored_response_is_replayed_without_validating_the_retry_again() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    // A key that may mint keys itself (a merchant key's default may not).
    let mut minter = key_body(&t);
    minter["permissions"] = json!(["integrations:create", "terminal"]);
    let minted = create_key(&app, &t.platform_key, Uuid::new_v4(), &minter).await;
    assert_eq!(minted.status, 200, "{}", minted.body);
    let key = minted.body["data"]["raw_key"].as_str().unwrap().to_string();

    let idem = Uuid::new_v4().to_string();
    let mut body = key_body(&t);
    body["expires_at"] = json!((chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339());
    let first = create_key(&app, &key, &idem, &body).await;
    assert_eq!(first.status, 200, "{}", first.body);
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;

    let again = create_key(&app, &key, &idem, &body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.text(), first.as_replayed());
    // The same body in another byte form (spaces, keys reordered) is the same request.
    let pretty = serde_json::to_string_pretty(&body).unwrap();
    let reordered = send(
        app.post("/auth/keys")
            .header("x-api-key", &key)
            .header("Idempotency-Key", &idem)
            .header("Content-Type", "application/json")
            .body(pretty),
    )
    .await;
    assert_eq!(reordered.status, 200, "{}", reordered.body);
    assert_eq!(reordered.text(), first.as_replayed());
    // A fresh request with the stale field is still a validation error.
    let fresh = create_key(&app, &key, Uuid::new_v4(), &body).await;
    assert_eq!(fresh.status, 400, "{}", fresh.body);
    assert_eq!(fresh.code(), "VALIDATION_ERROR");

    let mut changed = body.clone();
    changed["expires_at"] = json!(null);
    let changed = create_key(&app, &key, &idem, &changed).await;
    assert_eq!(changed.status, 422, "{}", changed.body);
    assert_eq!(changed.code(), "IDEMPOTENCY_KEY_REUSED");

    let key_id = minted.body["data"]["key_id"].as_str().unwrap();
    let revoke = json!({
        "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
        "context": {"merchant_id": t.merchant_id.to_string()},
        "reason": "test",
    });
    let revoked = send(
        app.post(&format!("/auth/keys/{key_id}/revoke"))
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&revoke),
    )
    .await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let refused = create_key(&app, &key, &idem, &body).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(refused.code(), "INVALID_API_KEY");
}

#[tokio::test]
async fn a_retry_with_the_same_key_replays_the_first_response_byte_for_byte() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let idem = Uuid::new_v4().to_string();
    let body = key_body(&t);
    let first = create_key(&app, &t.platform_key, &idem, &body).await;
    first.assert_envelope();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["meta"]["idempotency_replayed"], false);
    let raw_key = first.body["data"]["raw_key"].as_str().unwrap().to_string();
    assert_eq!(first.body["data"]["scope"], "branch");

    let second = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body["meta"]["idempotency_replayed"], true);
    assert_eq!(second.body["data"]["raw_key"], raw_key.as_str());
    assert_eq!(
        second.text(),
        first.as_replayed(),
        "only the replay flag differs"
    );
    assert_eq!(
        key_count(&app, &t).await,
        2,
        "the platform key and exactly one new key"
    );

    // The stored replay never holds the raw key in plaintext.
    use sea_orm::EntityTrait;
    let records = entities::idempotency_record::Entity::find()
        .all(&app.server.state.db)
        .await
        .unwrap();
    assert!(records.iter().all(|r| !r.response_body.contains(&raw_key)));

    // The new key works at once.
    let r = send(app.get("/capabilities").header("x-api-key", &raw_key)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["credential"]["scope"], "branch");
}

#[tokio::test]
async fn the_same_key_with_a_different_body_is_idempotency_key_reused() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let idem = Uuid::new_v4().to_string();
    let first = create_key(&app, &t.platform_key, &idem, &key_body(&t)).await;
    assert_eq!(first.status, 200);
    let mut other = key_body(&t);
    other["label"] = json!("till 2");
    let r = create_key(&app, &t.platform_key, &idem, &other).await;
    r.assert_envelope();
    assert_eq!(r.status, 422);
    assert_eq!(r.code(), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(key_count(&app, &t).await, 2);
}

#[tokio::test]
async fn twenty_concurrent_requests_with_one_key_execute_once() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let idem = Uuid::new_v4().to_string();
    let body = key_body(&t);
    let calls = (0..20).map(|_| create_key(&app, &t.platform_key, &idem, &body));
    let replies = futures::future::join_all(calls).await;
    let mut key_ids = std::collections::HashSet::new();
    let mut originals = 0;
    for r in &replies {
        // Retries wait for the first request and replay it.
        assert_eq!(r.status, 200, "{}", r.body);
        key_ids.insert(r.body["data"]["key_id"].as_str().unwrap().to_string());
        if r.body["meta"]["idempotency_replayed"] == json!(false) {
            originals += 1;
        }
    }
    assert_eq!(originals, 1, "exactly one execution");
    assert_eq!(key_ids.len(), 1, "one key id across all replies");
    assert_eq!(key_count(&app, &t).await, 2);
}

#[tokio::test]
async fn a_key_outside_the_callers_scope_is_forbidden_and_another_merchant_too() {
    let app = TestApp::spawn().await;
    let a = app.tenant(true).await;
    let b = app.tenant(true).await;
    // A's platform key asking for B's merchant.
    let r = send(
        app.post("/auth/keys")
            .header("x-api-key", &a.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&key_body(&b)),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "FORBIDDEN");
    // A branch key asking for a sibling branch.
    let first = send(
        app.post("/auth/keys")
            .header("x-api-key", &a.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&key_body(&a)),
    )
    .await;
    let branch_key = first.body["data"]["raw_key"].as_str().unwrap().to_string();
    let mut sibling = key_body(&a);
    sibling["branch_id"] = json!(a.branch_ids[1].to_string());
    let r = send(
        app.post("/auth/keys")
            .header("x-api-key", &branch_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&sibling),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "FORBIDDEN");
}

#[tokio::test]
async fn an_expired_record_is_purged_with_its_sealed_secret_and_the_key_runs_anew() {
    // A database of its own: a day on, every record in it has expired, and another test's
    // live records must not go with them.
    let app = TestApp::spawn_isolated(false, |_| {}).await;
    let t = app.tenant(true).await;
    let idem = Uuid::new_v4().to_string();
    let body = key_body(&t);
    let first = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(first.status, 200);
    let record = || async { records_of(&app, &idem).await.pop() };
    assert!(record().await.unwrap().sealed_secret.is_some());

    // The retention job, run as if the 24 hours had passed.
    let later = chrono::Utc::now() + chrono::Duration::hours(25);
    let purged = api::jobs::retention::prune(
        &app.server.state,
        api::store::db::retention::Table::IdempotencyRecords,
        later,
    )
    .await
    .unwrap();
    assert!(purged >= 1);
    assert!(
        record().await.is_none(),
        "the record and its sealed raw key are gone"
    );
    // The copies' own expiry comes before the record's.
    drop_copies(&app, &t, &idem).await;

    let again = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["meta"]["idempotency_replayed"], false);
    assert_ne!(again.body["data"]["key_id"], first.body["data"]["key_id"]);
}

/// Drops the short-lived response copies of `idem` (Redis in production, in-process in
/// embedded mode), as their own expiry (10 minutes at most) would: only the database record
/// is left.
async fn drop_copies(app: &TestApp, t: &TestTenant, idem: &str) {
    let fp = api::domain::credentials::api_key::cache_fingerprint(&t.platform_key);
    let copies = vec![
        api::idempotency::copy_key(t.integration_id, idem),
        api::infra::kv::idempotency_keys::credential_copy_key(&fp, idem),
    ];
    app.server.state.kv.del(&copies).await.unwrap();
    app.server.state.recent_responses.clear();
}

#[tokio::test]
async fn a_retry_after_the_copies_are_gone_is_replayed_from_the_database_and_runs_nothing_again() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let idem = Uuid::new_v4().to_string();
    let body = key_body(&t);
    let first = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(first.status, 200);
    let keys = key_count(&app, &t).await;
    drop_copies(&app, &t, &idem).await;

    let again = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    assert_eq!(
        again.body["data"], first.body["data"],
        "the same key, raw key included"
    );
    assert_eq!(key_count(&app, &t).await, keys, "no second key");

    drop_copies(&app, &t, &idem).await;
    let mut other = body.clone();
    other["label"] = json!("till 2");
    let reused = create_key(&app, &t.platform_key, &idem, &other).await;
    assert_eq!(reused.status, 422, "{}", reused.body);
    assert_eq!(reused.code(), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(key_count(&app, &t).await, keys, "still no second key");
}

#[tokio::test]
async fn an_expired_record_not_yet_purged_gives_way_to_a_new_request_with_its_key() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let idem = Uuid::new_v4().to_string();
    let body = key_body(&t);
    let first = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(first.status, 200);
    let db = &app.server.state.db;
    let old = records_of(&app, &idem).await.remove(0);
    // The replay window passes; the purge job has not run yet.
    entities::idempotency_record::Entity::update_many()
        .col_expr(
            entities::idempotency_record::Column::ExpiresAt,
            Expr::value(chrono::Utc::now() - chrono::Duration::seconds(1)),
        )
        .filter(entities::idempotency_record::Column::Id.eq(old.id))
        .exec(db)
        .await
        .unwrap();
    drop_copies(&app, &t, &idem).await;

    let again = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["meta"]["idempotency_replayed"], false);
    assert_ne!(again.body["data"]["key_id"], first.body["data"]["key_id"]);
    let records = records_of(&app, &idem).await;
    assert_eq!(
        records.len(),
        1,
        "the expired record was replaced, not kept beside"
    );
    assert_ne!(records[0].id, old.id);
    assert_ne!(
        records[0].sealed_secret, old.sealed_secret,
        "the old sealed raw key is gone"
    );
    assert!(records[0].expires_at > chrono::Utc::now());

    // And the new record replays as any other.
    drop_copies(&app, &t, &idem).await;
    let replay = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(replay.body["meta"]["idempotency_replayed"], true);
    assert_eq!(
        replay.body["data"]["raw_key"],
        again.body["data"]["raw_key"]
    );
}

#[tokio::test]
async fn a_replay_by_the_same_key_is_served_from_the_copy_fetched_with_the_credential() {
    if tests::mode() != tests::Mode::Production {
        // Response copies live in Redis only; embedded mode replays from its local database.
        return;
    }
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let idem = Uuid::new_v4().to_string();
    let body = key_body(&t);
    let first = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(first.status, 200);
    // Take away every other source of the response: only the copy the key check fetches
    // in its own round trip is left.
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::idempotency_record::Entity::delete_many()
        .filter(entities::idempotency_record::Column::IdempotencyKey.eq(idem.clone()))
        .exec(&app.server.state.db)
        .await
        .unwrap();
    app.server
        .state
        .kv
        .del(&[api::idempotency::copy_key(t.integration_id, &idem)])
        .await
        .unwrap();
    let again = create_key(&app, &t.platform_key, &idem, &body).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    assert_eq!(again.body["data"]["raw_key"], first.body["data"]["raw_key"]);
}
