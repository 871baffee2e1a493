//! The job pipeline: outbox row → relay → queue → worker → provider, retries, dead letters.
use std::time::Duration;

use api::{domain::outbox::job_requests, store};
use tests::{TestApp, TestTenant, eventually, send};
use uuid::Uuid;

fn sms(t: &TestTenant, phone: &str, code: &str) -> job_requests::SmsRequest {
    job_requests::SmsRequest {
        integration_id: t.integration_id,
        merchant_id: Some(t.merchant_id),
        is_sandbox: t.is_sandbox,
        phone: phone.into(),
        kind: "otp".into(),
        body: format!("Your code is {code}"),
        code: Some(code.into()),
        verification_token: None,
    }
}

/// The sandbox inbox of `phone` as `t`'s platform key sees it.
async fn inbox(app: &TestApp, t: &TestTenant, phone: &str) -> tests::Reply {
    let path = format!("/sandbox/messages?phone={}", phone.replace('+', "%2B"));
    send(app.get(&path).header("x-api-key", &t.platform_key)).await
}

/// Enqueues `req` in a transaction that commits; returns the job id.
async fn commit_sms(app: &TestApp, req: job_requests::SmsRequest) -> Uuid {
    let state = &app.server.state;
    let txn = state.db.begin().await.unwrap();
    let id = job_requests::send_sms(&txn, &state.sealer, req)
        .await
        .unwrap();
    txn.commit().await.unwrap();
    id
}

/// A phone number no other test uses.
fn fresh_phone(prefix: &str) -> String {
    let n = Uuid::new_v4().as_u128() % 10_000_000;
    format!("{prefix}{n:07}")
}

#[tokio::test]
async fn an_sms_job_goes_from_a_committed_outbox_row_to_the_sandbox_inbox() {
    let app = TestApp::spawn_with_workers().await;
    let t = app.tenant(true).await;
    let phone = fresh_phone("+4915");
    commit_sms(&app, sms(&t, &phone, "123456")).await;

    let msg = eventually(
        Duration::from_secs(20),
        "the SMS in the sandbox inbox",
        || async {
            let r = inbox(&app, &t, &phone).await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.body["data"].as_array().and_then(|a| a.first().cloned())
        },
    )
    .await;
    assert_eq!(msg["kind"], "otp");
    assert_eq!(msg["code"], "123456");
    assert_eq!(msg["phone"], phone);
    assert_eq!(msg["body"], "Your code is 123456");
    app.stop().await;
}

#[tokio::test]
async fn a_rolled_back_transaction_enqueues_nothing() {
    let app = TestApp::spawn_with_workers().await;
    let t = app.tenant(true).await;
    let phone = fresh_phone("+4916");
    let state = &app.server.state;
    let txn = state.db.begin().await.unwrap();
    let job_id = job_requests::send_sms(&txn, &state.sealer, sms(&t, &phone, "654321"))
        .await
        .unwrap();
    txn.rollback().await.unwrap();

    // A committed marker sent after it: once it arrives, the rolled-back one had every chance.
    let marker = fresh_phone("+4917");
    commit_sms(&app, sms(&t, &marker, "000000")).await;
    eventually(
        Duration::from_secs(20),
        "the committed marker SMS",
        || async {
            let r = inbox(&app, &t, &marker).await;
            r.body["data"]
                .as_array()
                .filter(|a| !a.is_empty())
                .map(|_| ())
        },
    )
    .await;

    let r = inbox(&app, &t, &phone).await;
    assert_eq!(
        r.body["data"],
        serde_json::json!([]),
        "a rolled-back SMS was sent"
    );
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let rows = entities::outbox::Entity::find()
        .filter(entities::outbox::Column::EventId.eq(job_id))
        .all(&state.db)
        .await
        .unwrap();
    assert!(rows.is_empty(), "the outbox kept a rolled-back row");
    app.stop().await;
}

#[tokio::test]
async fn a_job_that_always_fails_is_dead_lettered_with_its_error_history() {
    let app = TestApp::spawn_with_workers().await;
    let t = app.tenant(true).await;
    // Sandbox numbers starting +9990 make the mock provider fail every attempt.
    let phone = fresh_phone("+99901");
    let state = &app.server.state;
    let job_id = commit_sms(&app, sms(&t, &phone, "111111")).await;

    let dead = eventually(Duration::from_secs(30), "the dead letter", || async {
        let rows = store::queues::dead_letters::list(
            &state.db,
            &store::queues::dead_letters::Filter::default(),
            None,
            500,
        )
        .await
        .unwrap();
        rows.into_iter().find(|d| d.job_id == job_id)
    })
    .await;
    let max = state.config.job_max_attempts as i32;
    assert_eq!(dead.attempts, max);
    assert_eq!(dead.status.as_str(), "dead");
    assert_eq!(dead.queue, "sms_send");
    assert_eq!(dead.merchant_id, Some(t.merchant_id));
    let history = dead.error_history.as_array().unwrap();
    assert_eq!(
        history.len(),
        max as usize,
        "one entry per attempt: {history:?}"
    );
    for (i, h) in history.iter().enumerate() {
        assert_eq!(h["attempt"], i as u64 + 1);
        assert!(h["error"].as_str().unwrap().contains("always fails"), "{h}");
    }
    // The sealed content never appears in the dead letter.
    assert!(!dead.payload.to_string().contains("111111"));
    let r = inbox(&app, &t, &phone).await;
    assert_eq!(r.body["data"], serde_json::json!([]));
    app.stop().await;
}

#[tokio::test]
async fn sandbox_messages_are_not_found_for_a_production_key() {
    let app = TestApp::spawn().await;
    let t = app.tenant(false).await;
    let r = send(
        app.get("/sandbox/messages?phone=%2B4915112345678")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    r.assert_envelope();
    assert_eq!(r.status, 404);
    assert_eq!(r.code(), "NOT_FOUND");
}

#[tokio::test]
async fn one_tenant_never_reads_another_tenants_sandbox_messages() {
    let app = TestApp::spawn_with_workers().await;
    let a = app.tenant(true).await;
    let b = app.tenant(true).await;
    let phone = fresh_phone("+4918");
    commit_sms(&app, sms(&a, &phone, "222222")).await;
    let q = format!("/sandbox/messages?phone={}", phone.replace('+', "%2B"));
    eventually(Duration::from_secs(20), "tenant A's SMS", || async {
        let r = send(app.get(&q).header("x-api-key", &a.platform_key)).await;
        r.body["data"]
            .as_array()
            .filter(|x| !x.is_empty())
            .map(|_| ())
    })
    .await;
    let r = send(app.get(&q).header("x-api-key", &b.platform_key)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"], serde_json::json!([]));
    app.stop().await;
}

#[tokio::test]
async fn a_production_keys_sms_goes_to_the_http_provider_with_its_token() {
    use poem::{
        EndpointExt, Route, handler, post,
        web::{Data, Json},
    };
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<(Option<String>, serde_json::Value)>>>;
    #[handler]
    fn receive(
        req: &poem::Request,
        Json(body): Json<serde_json::Value>,
        seen: Data<&Seen>,
    ) -> &'static str {
        let auth = req
            .headers()
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string());
        seen.0.lock().unwrap().push((auth, body));
        "queued"
    }
    let seen: Seen = Arc::default();
    let port =
        tests::serve_endpoint(Route::new().at("/sms", post(receive)).data(seen.clone())).await;

    let app = TestApp::spawn_isolated(true, |c| {
        c.sms_provider_url = Some(format!("http://127.0.0.1:{port}/sms"));
        c.sms_provider_token = Some(api::infra::secret::Secret::new("gateway-token"));
    })
    .await;
    let t = app.tenant(false).await;
    let phone = fresh_phone("+4919");
    let job_id = commit_sms(&app, sms(&t, &phone, "333333")).await;

    let (auth, body) = eventually(Duration::from_secs(20), "the gateway call", || async {
        seen.lock()
            .unwrap()
            .iter()
            .find(|(_, b)| b["to"] == phone.as_str())
            .cloned()
    })
    .await;
    assert_eq!(auth.as_deref(), Some("Bearer gateway-token"));
    assert_eq!(body["body"], "Your code is 333333");
    assert_eq!(body["reference"], job_id.to_string());
    app.stop().await;
}

/// The WAL header's checkpoint sequence number: SQLite counts one each time a writer starts
/// the write-ahead log over, which it does only once the log was wholly copied into the
/// database file. Read from the file itself, since asking SQLite would copy it.
fn wal_restarts(db_file: &std::path::Path) -> u32 {
    let header = std::fs::read(format!("{}-wal", db_file.display())).expect("the WAL exists");
    u32::from_be_bytes(header[12..16].try_into().unwrap())
}

/// Embedded mode's job runtime copies the write-ahead log into the database file (its
/// writers no longer do it inside their commits), so the log is started over and does not
/// grow without bound.
#[tokio::test]
async fn the_job_runtime_keeps_the_sqlite_write_ahead_log_short() {
    use sea_orm::{ConnectionTrait, DbBackend};
    if tests::mode() != tests::Mode::Embedded {
        return;
    }
    let app = TestApp::spawn_isolated(true, |_| {}).await;
    let db = &app.server.state.db;
    assert_eq!(db.get_database_backend(), DbBackend::Sqlite);
    let file = db
        .connection()
        .get_sqlite_connection_pool()
        .connect_options()
        .get_filename()
        .to_path_buf();
    let write = async |sql: &str| {
        let txn = store::begin(db).await.unwrap();
        txn.execute_unprepared(sql).await.unwrap();
        txn.commit().await.unwrap();
    };
    write("CREATE TABLE wal_probe (x BLOB)").await;
    let before = wal_restarts(&file);
    for _ in 0..200 {
        write("INSERT INTO wal_probe VALUES (randomblob(6000))").await;
    }
    eventually(
        Duration::from_secs(10),
        "the write-ahead log to be started over",
        async || {
            write("INSERT INTO wal_probe VALUES (1)").await;
            (wal_restarts(&file) > before).then_some(())
        },
    )
    .await;
    app.stop().await;
}
