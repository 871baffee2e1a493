//! `wallet-worker dlq`, run as an operator runs it.
use std::{process::Command, time::Duration};

use sea_orm::ConnectionTrait;
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

/// Runs `dlq <args>`, expecting success; its stdout.
async fn dlq_ok(args: &[&str]) -> String {
    let out = run(dlq_command(args)).await;
    assert!(
        out.status.success(),
        "dlq {args:?} exited {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `dlq <args> --json`, parsed: one document, or (for a bulk action) one per line.
async fn dlq(args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = args.to_vec();
    all.push("--json");
    dlq_ok(&all)
        .await
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn dead_sms(app: &TestApp, t: &TestTenant, phone: &str) -> Uuid {
    tests::dead_letters::dead_sms(app, t, phone, "gateway down").await
}

#[tokio::test]
async fn a_replayed_dead_letter_delivers_once_more_however_often_it_is_replayed() {
    let app = TestApp::spawn_with_workers().await;
    let t = app.tenant(true).await;
    let phone = format!("+4915{:07}", Uuid::new_v4().as_u128() % 10_000_000);
    let id = dead_sms(&app, &t, &phone).await;
    let merchant = t.merchant_id.to_string();

    let listed = &dlq(&[
        "list",
        "--merchant",
        &merchant,
        "--queue",
        "sms_send",
        "--error",
        "GATEWAY",
    ])
    .await[0];
    let letters = listed["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{listed}");
    assert_eq!(letters[0]["id"], id.to_string());
    assert_eq!(listed["next_before"], serde_json::Value::Null);
    let shown = &dlq(&["show", &id.to_string()]).await[0];
    assert_eq!(shown["error_history"][0]["error"], "gateway down");
    assert_eq!(
        shown["payload"]["phone"], "[redacted]",
        "no phone number on screen"
    );
    assert!(!shown.to_string().contains(&phone));

    let first = dlq(&["replay", &id.to_string(), "--reason", "gateway back"]).await;
    assert_eq!(first[0]["outcome"], "replayed", "{first:?}");
    assert_eq!(first[1]["summary"]["changed"], 1);
    let second = dlq(&["replay", &id.to_string(), "--reason", "again"]).await;
    assert_eq!(second[0]["outcome"], "unchanged", "{second:?}");
    assert_eq!(second[1]["summary"]["unchanged"], 1);

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
    assert_eq!(purged[0]["outcome"], "purged");
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
    // Without a reason, nothing happens, and the exit code says it was asked wrongly.
    let id2 = dead_sms(&app, &t, "+4915100000002").await;
    let out = run(dlq_command(&["purge", &id2.to_string(), "--reason", " "])).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(tests::dead_letters::status_of(&app, id2).await, "dead");
}

#[tokio::test]
async fn unknown_filter_values_are_usage_errors_that_name_the_allowed_values() {
    for (args, allowed) in [
        (
            vec!["list", "--queue", "emails"],
            "sms_send, webhook_deliver, webhook_batch, report_run",
        ),
        (vec!["list", "--status", "dying"], "dead, replayed, purged"),
        (
            vec!["replay", "--all", "--job-type", "x", "--reason", "r"],
            "sms_send, webhook_deliver, webhook_batch, report_run",
        ),
        (
            vec!["purge", "--all", "--older-than", "2 weeks", "--reason", "r"],
            "15m, 2h or 7d",
        ),
    ] {
        let out = run(dlq_command(&args)).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(allowed), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed nothing");
    }
    // Naming a letter and a filter at once is ambiguous: refused, not guessed.
    let out = run(dlq_command(&[
        "replay",
        &Uuid::now_v7().to_string(),
        "--queue",
        "sms_send",
        "--reason",
        "r",
    ]))
    .await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn a_bulk_action_pages_through_every_match_and_a_dry_run_changes_nothing() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let merchant = t.merchant_id.to_string();
    // More than two of the bulk action's pages of 200.
    tests::dead_letters::many(&app, &t, 450, "receiver timeout").await;
    tests::dead_letters::many(&app, &t, 5, "bad certificate").await;

    let lines = dlq(&[
        "purge",
        "--all",
        "--merchant",
        &merchant,
        "--error",
        "timeout",
        "--reason",
        "stale",
        "--dry-run",
    ])
    .await;
    let (last, letters) = lines.split_last().unwrap();
    assert_eq!(letters.len(), 450, "every match is listed, past every page");
    assert!(letters.iter().all(|l| l["outcome"] == "would purge"));
    assert_eq!(last["summary"]["dry_run"], true);
    assert_eq!(last["summary"]["matched"], 450);
    assert_eq!(last["summary"]["changed"], 0);
    assert_eq!(
        tests::dead_letters::count(&app, t.merchant_id, "dead").await,
        455
    );

    let table = dlq_ok(&[
        "purge",
        "--all",
        "--merchant",
        &merchant,
        "--error",
        "timeout",
        "--reason",
        "stale",
    ])
    .await;
    assert!(
        table
            .lines()
            .last()
            .unwrap()
            .starts_with("450 matched: 450 purged, 0 no longer dead"),
        "{}",
        table.lines().last().unwrap()
    );
    assert!(
        table.starts_with("ID "),
        "a table with a header: {}",
        &table[..80]
    );
    assert_eq!(
        tests::dead_letters::count(&app, t.merchant_id, "purged").await,
        450
    );
    assert_eq!(
        tests::dead_letters::count(&app, t.merchant_id, "dead").await,
        5,
        "letters outside the filter are untouched"
    );

    // The whole action is audited once, beside each letter's own entry.
    let db = &app.server.state.db;
    let whole = db
        .query_all_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            format!(
                "SELECT reason FROM operator_audit_log WHERE action = 'dead_letter.bulk_purge' \
                 AND CAST(details AS TEXT) LIKE '%{merchant}%'"
            ),
        ))
        .await
        .unwrap();
    assert_eq!(whole.len(), 1);

    let stats = &dlq(&["stats"]).await[0];
    assert!(stats["total"].as_i64().unwrap() >= 5, "{stats}");
    let human = dlq_ok(&["list", "--merchant", &merchant, "--limit", "2"]).await;
    assert!(
        human.contains("LAST ERROR") && human.contains("bad certificate"),
        "{human}"
    );
    assert!(human.contains("more match: add --before "), "{human}");
}

/// A letter whose update the database refuses (a trigger stands in for whatever might
/// break one letter) does not stop the others: the rest are done, the output names the
/// failure, and the exit code is 3 (partial).
#[tokio::test]
async fn a_bulk_action_that_fails_for_some_letters_does_the_rest_and_exits_3() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let db = &app.server.state.db;
    let backend = db.get_database_backend();
    let ddl: &[&str] = match backend {
        sea_orm::DbBackend::Postgres => &[
            "CREATE OR REPLACE FUNCTION refuse_poisoned_letters() RETURNS trigger AS $$ \
             BEGIN IF OLD.last_error LIKE 'poisoned letter%' THEN \
             RAISE EXCEPTION 'this letter cannot change'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
            "DROP TRIGGER IF EXISTS refuse_poisoned ON dead_letters",
            "CREATE TRIGGER refuse_poisoned BEFORE UPDATE ON dead_letters FOR EACH ROW \
             EXECUTE FUNCTION refuse_poisoned_letters()",
        ],
        _ => &[
            "CREATE TRIGGER IF NOT EXISTS refuse_poisoned BEFORE UPDATE ON dead_letters \
             WHEN OLD.last_error LIKE 'poisoned letter%' \
             BEGIN SELECT RAISE(ABORT, 'this letter cannot change'); END",
        ],
    };
    for sql in ddl {
        db.execute_unprepared(sql).await.unwrap();
    }
    let fine = tests::dead_letters::many(&app, &t, 3, "receiver timeout").await;
    let poisoned = tests::dead_letters::many(&app, &t, 1, "poisoned letter").await;

    let out = run(dlq_command(&[
        "replay",
        "--all",
        "--merchant",
        &t.merchant_id.to_string(),
        "--reason",
        "INC-3",
        "--json",
    ]))
    .await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, letters) = lines.split_last().unwrap();
    assert_eq!(summary["summary"]["matched"], 4);
    assert_eq!(summary["summary"]["changed"], 3);
    assert_eq!(summary["summary"]["failed"], 1);
    let failed: Vec<_> = letters
        .iter()
        .filter(|l| l["outcome"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(failed[0]["error"].is_string());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 4 failed"));
    // By id: a worker of the run may already have taken a replayed job of these made-up
    // payloads and dead-lettered it anew for this merchant.
    for id in fine {
        assert_eq!(tests::dead_letters::status_of(&app, id).await, "replayed");
    }
    assert_eq!(
        tests::dead_letters::status_of(&app, poisoned[0]).await,
        "dead"
    );
}

/// In a directory where no service runs, the commands say which database they looked for
/// and what to set, in an operator's words (no HTTP advice), and leave no file behind; on a
/// database that was never migrated they say to migrate it.
#[tokio::test]
async fn without_the_services_database_the_commands_say_where_they_looked_and_what_to_set() {
    let bin = env!("CARGO_BIN_EXE_wallet-worker");
    for args in [
        &["dlq", "list"][..],
        &["dlq", "replay", "--all", "--dry-run", "--reason", "x"][..],
    ] {
        let (out, dir) = tests::procs::run_in_empty_dir(bin, args, &[]);
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
        assert!(
            said.contains("wallet-data/wallet.db")
                && said.contains("WALLET_DATABASE_URL")
                && said.contains("WALLET_DATA_DIR"),
            "{args:?}: {said}"
        );
        for http_words in ["Idempotency-Key", "no such table", "Internal error"] {
            assert!(!said.contains(http_words), "{args:?}: {said}");
        }
        assert!(!dir.join("wallet-data").exists(), "nothing is created");
        let _ = std::fs::remove_dir_all(dir);
    }

    // This run's settings but for the database.
    let url = tests::procs::unmigrated_database_url();
    let mut env = tests::procs::service_env(&tests::test_config());
    env.retain(|(k, _)| !k.starts_with("WALLET_DATABASE_"));
    env.push(("WALLET_DATABASE_URL".into(), url));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (out, dir) = tests::procs::run_in_empty_dir(bin, &["dlq", "list"], &env);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("never migrated") && said.contains("wallet-api migrate"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
