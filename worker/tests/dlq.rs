//! `wallet-worker dlq`, run as an operator runs it.
use std::{process::Command, time::Duration};

use api::{domain::job_requests, store};
use sea_orm::{ConnectionTrait, TransactionTrait};
use tests::{TestApp, TestTenant, eventually, send};
use uuid::Uuid;

/// `wallet-worker dlq <args>` against this test run's database.
fn dlq_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wallet-worker"));
    cmd.arg("dlq").args(args);
    tests::against_this_run(cmd)
}

/// Runs the command off the test's runtime. The app under test (its relay and job workers)
/// shares that runtime: blocking it while one of them held SQLite's write lock left the CLI
/// waiting for a lock nobody could release, until its busy timeout (a flaky failure).
async fn run(mut cmd: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("wallet-worker runs"))
        .await
        .expect("the command's thread")
}

async fn dlq(args: &[&str]) -> Vec<serde_json::Value> {
    let out = run(dlq_command(args)).await;
    assert!(
        out.status.success(),
        "dlq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    if args[0] == "show" {
        return vec![serde_json::from_str(&text).unwrap()];
    }
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A dead letter of a real (sealed) SMS payload that would now deliver.
async fn dead_sms(app: &TestApp, t: &TestTenant, phone: &str) -> Uuid {
    let state = &app.server.state;
    let txn = state.db.begin().await.unwrap();
    let job = job_requests::send_sms(
        &txn,
        &state.sealer,
        job_requests::SmsRequest {
            integration_id: t.integration_id,
            merchant_id: Some(t.merchant_id),
            is_sandbox: true,
            phone: phone.into(),
            kind: "otp".into(),
            body: "Your code is 424242".into(),
            code: Some("424242".into()),
            verification_token: None,
        },
    )
    .await
    .unwrap();
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let row = entities::outbox::Entity::find()
        .filter(entities::outbox::Column::EventId.eq(job))
        .one(&txn)
        .await
        .unwrap()
        .unwrap();
    txn.rollback().await.unwrap();
    store::dead_letters::insert_once(
        &state.db,
        store::dead_letters::NewDeadLetter {
            job_id: job,
            queue: "sms_send",
            job_type: "sms_send",
            merchant_id: Some(t.merchant_id),
            payload: row.payload,
            attempts: 8,
            error_history: serde_json::json!([{"attempt": 8, "error": "gateway down"}]),
            last_error: "gateway down",
            first_enqueued_at: chrono::Utc::now(),
            dead_at: chrono::Utc::now(),
        },
    )
    .await
    .unwrap();
    store::dead_letters::list(
        &state.db,
        &store::dead_letters::Filter::default(),
        None,
        10_000,
    )
    .await
    .unwrap()
    .into_iter()
    .find(|d| d.job_id == job)
    .unwrap()
    .id
}

#[tokio::test]
async fn a_replayed_dead_letter_delivers_once_more_however_often_it_is_replayed() {
    let app = TestApp::spawn_with_workers().await;
    let t = app.tenant(true).await;
    let phone = format!("+4915{:07}", Uuid::new_v4().as_u128() % 10_000_000);
    let id = dead_sms(&app, &t, &phone).await;

    let listed = dlq(&["list", "--queue", "sms_send", "--error", "gateway down"]).await;
    assert!(
        listed.iter().any(|d| d["id"] == id.to_string()),
        "{listed:?}"
    );
    let shown = &dlq(&["show", &id.to_string()]).await[0];
    assert_eq!(shown["error_history"][0]["error"], "gateway down");

    let first = dlq(&["replay", &id.to_string()]).await;
    assert!(
        first[0]["outcome"].as_str().unwrap().starts_with("Done"),
        "{first:?}"
    );
    let second = dlq(&["replay", &id.to_string()]).await;
    assert!(
        second[0]["outcome"]
            .as_str()
            .unwrap()
            .starts_with("NotDead"),
        "{second:?}"
    );

    let inbox = format!("/sandbox/messages?phone={}", phone.replace('+', "%2B"));
    eventually(Duration::from_secs(20), "the replayed SMS", || async {
        let r = send(app.get(&inbox).header("x-api-key", &t.platform_key)).await;
        r.body["data"]
            .as_array()
            .filter(|a| !a.is_empty())
            .map(|_| ())
    })
    .await;
    // Time for a second delivery, were there one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = send(app.get(&inbox).header("x-api-key", &t.platform_key)).await;
    assert_eq!(
        r.body["data"].as_array().unwrap().len(),
        1,
        "delivered once more, not twice"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_purge_needs_a_reason_and_is_audited() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let id = dead_sms(&app, &t, "+4915100000001").await;
    let purged = dlq(&["purge", &id.to_string(), "--reason", "customer unreachable"]).await;
    assert!(purged[0]["outcome"].as_str().unwrap().starts_with("Done"));
    let shown = &dlq(&["show", &id.to_string()]).await[0];
    assert_eq!(shown["status"], "purged");
    assert_eq!(shown["purge_reason"], "customer unreachable");
    let db = &app.server.state.db;
    let audited = db
        .query_all_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            format!("SELECT action FROM operator_audit_log WHERE target_id = '{id}'"),
        ))
        .await
        .unwrap();
    assert_eq!(audited.len(), 1);
    // Without a reason, nothing happens.
    let id2 = dead_sms(&app, &t, "+4915100000002").await;
    let out = run(dlq_command(&["purge", &id2.to_string(), "--reason", " "])).await;
    assert!(!out.status.success());
    assert_eq!(dlq(&["show", &id2.to_string()]).await[0]["status"], "dead");
}
