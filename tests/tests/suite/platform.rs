//! Platform endpoints: health, capabilities, credentials at the door.
use std::time::{Duration, Instant};

use tests::{TestApp, redis_server::PrivateRedis, send};

#[tokio::test]
async fn health_answers_without_a_credential() {
    let app = TestApp::spawn().await;
    let r = send(app.get("/health")).await;
    r.assert_envelope();
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"]["status"], "ok", "{}", r.body);
    assert_eq!(r.body["data"]["degraded_subsystems"], serde_json::json!([]));
}

#[tokio::test]
async fn the_platform_key_from_tenant_create_works_at_once() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let r = send(
        app.get("/capabilities")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["credential"]["scope"], "integration");
    assert_eq!(
        d["credential"]["integration_id"],
        t.integration_id.to_string()
    );
    assert_eq!(d["credential"]["is_sandbox"], true);
    assert_eq!(d["currencies"], serde_json::json!(["EUR"]));
    assert_eq!(
        d["wallet_programs"][0]["wallet_program_id"],
        t.wallet_program_id.to_string()
    );
    assert_eq!(
        d["supported_identify_credential_types"],
        serde_json::json!([
            "phone",
            "card_fingerprint",
            "short_code",
            "provider_customer_id",
            "qr"
        ])
    );
    let ops: Vec<&str> = d["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["operation_id"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"getCapabilities"), "{ops:?}");
}

#[tokio::test]
async fn a_wrong_or_unknown_key_is_invalid_api_key() {
    let app = TestApp::spawn().await;
    let t = app.tenant(false).await;
    // Right prefix, wrong secret part.
    let mut forged = t.platform_key.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    for key in [
        forged.as_str(),
        "wk_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "not-a-key",
        "",
    ] {
        let r = send(app.get("/capabilities").header("x-api-key", key)).await;
        r.assert_envelope();
        assert_eq!(r.status, 401, "{key}: {}", r.body);
        assert_eq!(r.code(), "INVALID_API_KEY");
        assert_eq!(r.body["ok"], false);
        assert_eq!(r.body["data"], serde_json::Value::Null);
    }
    let r = send(app.get("/capabilities")).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "INVALID_API_KEY");
    // The real key still works after the failures.
    let r = send(
        app.get("/capabilities")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn an_invalid_bearer_token_is_invalid_api_key() {
    let app = TestApp::spawn().await;
    let r = send(
        app.get("/capabilities")
            .bearer_auth("eyJhbGciOiJub25lIn0.e30."),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "INVALID_API_KEY");
}

#[tokio::test]
async fn health_reports_redis_degraded_and_redis_calls_fail_fast_and_retryable() {
    let mut redis = PrivateRedis::start();
    let url = redis.url();
    let app = TestApp::spawn_with(false, |c| {
        c.redis_url = Some(url);
        c.redis_mode = api::config::RedisMode::Standalone;
        c.redis_timeout_ms = 300;
    })
    .await;
    let t = app.tenant(true).await;
    let r = send(
        app.get("/capabilities")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(send(app.get("/health")).await.body["data"]["status"], "ok");

    redis.stop();

    let degraded = assert_degraded_health(&app, "redis").await;
    assert!(!degraded.contains(&"database".to_string()), "{degraded:?}");
    // Every authenticated call needs Redis (the key check).
    assert_fails_fast_and_retryable(&app, &t.platform_key, "redis", "/capabilities").await;
}

/// `GET /health` still answers, degraded, naming `subsystem`; returns every name listed.
async fn assert_degraded_health(app: &TestApp, subsystem: &str) -> Vec<String> {
    let r = send(app.get("/health")).await;
    r.assert_envelope();
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"]["status"], "degraded");
    let degraded: Vec<String> = r.body["data"]["degraded_subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    assert!(degraded.iter().any(|s| s == subsystem), "{}", r.body);
    degraded
}

/// A call (`path`) that needs the broken dependency gets a clear, retryable 503 within its
/// bound.
async fn assert_fails_fast_and_retryable(app: &TestApp, key: &str, subsystem: &str, path: &str) {
    let started = Instant::now();
    let r = send(app.get(path).header("x-api-key", key)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    r.assert_envelope();
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.code(), "INTERNAL_SERVER_ERROR");
    assert_eq!(r.body["error"]["details"]["subsystem"], subsystem);
    assert_eq!(r.body["error"]["details"]["retryable"], true);
    assert!(r.headers.get("retry-after").is_some());
}

#[tokio::test]
async fn health_reports_the_database_degraded_and_calls_fail_fast_and_retryable() {
    if tests::mode() != tests::Mode::Production {
        eprintln!("production mode only: an embedded SQLite file has no server to stop");
        return;
    }
    let (proxy, proxied) = tests::proxy::database().await;
    let app = TestApp::spawn_with(false, |c| {
        c.database_url = Some(proxied);
        c.db_acquire_timeout_ms = 1000;
    })
    .await;
    let t = app.tenant(true).await;
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);

    proxy.cut();

    assert_degraded_health(&app, "database").await;
    // Listing keys reads the database (capabilities may be answered from the replica's
    // 5-second copy).
    assert_fails_fast_and_retryable(&app, &t.platform_key, "database", "/auth/keys").await;
}

#[tokio::test]
async fn a_key_made_unusable_is_refused_at_once_on_every_replica() {
    // Two API "replicas" sharing one database and one cache (Redis in production).
    let a = TestApp::spawn().await;
    let t = a.tenant(true).await;
    let b_state = if tests::mode() == tests::Mode::Production {
        Some(api::build_state(tests::test_config()).await.unwrap())
    } else {
        None
    };
    let r = send(a.get("/capabilities").header("x-api-key", &t.platform_key)).await;
    assert_eq!(r.status, 200);

    // Revoke as the key lifecycle does: invalidate the cache (on any replica), then the row.
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    let key = entities::api_key::Entity::find()
        .filter(entities::api_key::Column::IntegrationId.eq(t.integration_id))
        .one(&a.server.state.db)
        .await
        .unwrap()
        .unwrap();
    let invalidating = b_state.as_ref().unwrap_or(&a.server.state);
    invalidating.key_auth().invalidate(key.id).await.unwrap();
    entities::api_key::Entity::update_many()
        .col_expr(entities::api_key::Column::Status, Expr::value("inactive"))
        .filter(entities::api_key::Column::Id.eq(key.id))
        .exec(&a.server.state.db)
        .await
        .unwrap();

    let r = send(a.get("/capabilities").header("x-api-key", &t.platform_key)).await;
    assert_eq!(r.status, 401, "the cached key still worked: {}", r.body);
    assert_eq!(r.code(), "INVALID_API_KEY");
}

#[tokio::test]
async fn a_verified_key_is_served_from_the_cache_not_bcrypt() {
    use api::domain::credentials::{api_key, authenticate};
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let kv = &app.server.state.kv;
    let entry = authenticate::cache_key(&api_key::cache_fingerprint(&t.platform_key));
    assert_eq!(kv.get(&entry).await.unwrap(), None);
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);
    let cached = kv
        .get(&entry)
        .await
        .unwrap()
        .expect("the first verification fills the cache");
    assert!(
        !cached.contains(&t.platform_key),
        "the cache never holds the raw key"
    );
    // With the row's hash replaced, only the cache can still let the key in.
    break_key_hashes(&app, t.integration_id).await;
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);
}

/// Replaces the key rows' hashes of an integration: from then on only the cache (or a
/// renewal, which never runs bcrypt) can let its keys in.
async fn break_key_hashes(app: &TestApp, integration_id: uuid::Uuid) {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    entities::api_key::Entity::update_many()
        .col_expr(
            entities::api_key::Column::KeyHash,
            Expr::value("$2b$10$invalidinvalidinvalidinvalidinvalidinvalidinvalidinva"),
        )
        .filter(entities::api_key::Column::IntegrationId.eq(integration_id))
        .exec(&app.server.state.db)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_key_in_use_is_renewed_in_the_cache_before_its_entry_expires_without_bcrypt() {
    // Entries live 3 s and are renewed from 2 s on.
    let app = TestApp::spawn_with(false, |c| c.key_cache_ttl_secs = 3).await;
    let t = app.tenant(true).await;
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);
    let verified = Instant::now();
    break_key_hashes(&app, t.integration_id).await;

    tokio::time::sleep(Duration::from_millis(2300)).await;
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);
    // Past the first entry's lifetime: only the renewed entry can let the key in.
    tokio::time::sleep(Duration::from_millis(3700).saturating_sub(verified.elapsed())).await;
    assert_eq!(
        tests::key_works(&app, &t.platform_key).await,
        200,
        "the entry was not renewed"
    );
}

#[tokio::test]
async fn a_renewal_refuses_a_key_whose_integration_was_suspended_behind_the_cache() {
    use api::domain::credentials::{api_key, authenticate};
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    let app = TestApp::spawn_with(false, |c| c.key_cache_ttl_secs = 3).await;
    let t = app.tenant(true).await;
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);
    // Straight in the table, so nothing invalidates the cache.
    entities::integration::Entity::update_many()
        .col_expr(
            entities::integration::Column::Status,
            Expr::value("SUSPENDED"),
        )
        .filter(entities::integration::Column::Id.eq(t.integration_id))
        .exec(&app.server.state.db)
        .await
        .unwrap();
    assert_eq!(
        tests::key_works(&app, &t.platform_key).await,
        200,
        "served from the cache until the renewal"
    );
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let r = send(
        app.get("/capabilities")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.code(), "INVALID_API_KEY");
    let entry = authenticate::cache_key(&api_key::cache_fingerprint(&t.platform_key));
    assert_eq!(
        app.server.state.kv.get(&entry).await.unwrap(),
        None,
        "the refused key's entry is dropped"
    );
    let r = send(
        app.get("/capabilities")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
}

#[tokio::test]
async fn guessing_against_a_known_key_prefix_is_throttled_without_locking_out_the_holder() {
    use api::domain::credentials::authenticate::MAX_FAILURES;
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    // The holder's key is verified and cached before the attack.
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);
    let prefix_len = t.platform_key.len() - 28;
    let guess = |i: u64| format!("{}{:0>28}", &t.platform_key[..prefix_len], i);
    // The holder's own verification above was the first of the window's attempts.
    for i in 1..MAX_FAILURES {
        let r = send(app.get("/capabilities").header("x-api-key", guess(i))).await;
        assert_eq!(r.status, 401, "guess {i}");
    }
    let r = send(app.get("/capabilities").header("x-api-key", guess(999))).await;
    r.assert_envelope();
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.code(), "RATE_LIMITED");
    assert!(r.headers.get("retry-after").is_some());
    // The real key still works from the cache.
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 200);
}

#[tokio::test]
async fn a_burst_on_a_key_not_yet_cached_verifies_it_once_and_every_request_succeeds() {
    use api::domain::credentials::authenticate::MAX_FAILURES;
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    // Twice the prefix's verification budget, all at once, before anything is cached (as
    // when a busy key's cached principal expires).
    let burst = (0..MAX_FAILURES * 2).map(|_| {
        send(
            app.get("/capabilities")
                .header("x-api-key", &t.platform_key),
        )
    });
    for r in futures::future::join_all(burst).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The burst cost one verification: the rest of the budget is still there for guesses.
    let prefix_len = t.platform_key.len() - 28;
    for i in 1..MAX_FAILURES {
        let guess = format!("{}{:0>28}", &t.platform_key[..prefix_len], i);
        let r = send(app.get("/capabilities").header("x-api-key", guess)).await;
        assert_eq!(r.status, 401, "guess {i}: {}", r.body);
    }
}
