//! Report runs (`POST/GET /{integrationId}/reports`, `…/{id}/file`): a roll-forward asked
//! for is run by a worker from the ledger alone, its file downloads with its SHA-256, and a
//! finance team's tools (Python's csv module, DuckDB) read it: every row closes, each day
//! opens where the last closed, and each day's closing is the liability at its end.
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tests::finance::{
    advance_days, clock_today, download, end_of, liability_at, moved, run_report,
};
use tests::{TestApp, eventually, shop::Shop};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The liability the endpoint gives at the last instant of UTC day `d`.
async fn liability_at_end_of(shop: &Shop<'_>, d: chrono::NaiveDate) -> i64 {
    liability_at(shop, end_of(d))
        .await
        .iter()
        .map(|l| l["liability_minor"].as_i64().unwrap())
        .sum()
}

#[tokio::test]
async fn a_rollforward_closes_to_the_cent_every_day_and_a_finance_teams_tools_read_it() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let payer = shop.customer().await;
    let first = clock_today(&shop).await;
    shop.fund(&payer, 10_000).await;
    shop.grant(&payer, 500, "RELEASED", 30 * 86_400).await;
    let waiting = shop.customer_in("PENDING_PROOF").await;
    shop.grant(&waiting, 300, "LOCKED", 30 * 86_400).await;
    advance_days(&shop, 1).await;
    let p = shop.pay(&payer, 1_200).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let paid = p.body["data"]["payment_id"].as_str().unwrap().to_string();
    let r = shop
        .post(
            &format!("/payments/{paid}/refund"),
            json!({"amount_minor": 300, "reason": "returned an item"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    advance_days(&shop, 1).await;
    let last = clock_today(&shop).await.pred_opt().unwrap();

    // A day that has not ended yet cannot be reported.
    let early = shop
        .control(
            &format!("/{}/reports", shop.tenant.integration_id),
            json!({"type": "liability_rollforward", "from": first.to_string(), "to": clock_today(&shop).await.to_string()}),
        )
        .await;
    assert_eq!(early.code(), "VALIDATION_ERROR", "{}", early.body);

    let run = run_report(
        &shop,
        json!({"type": "liability_rollforward", "from": first.to_string(), "to": last.to_string()}),
    )
    .await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let days = (last - first).num_days() + 1;
    // One row per day and class (5), for the one merchant and currency.
    assert_eq!(run["row_count"], json!(days * 5));
    let (headers, file) = download(&shop, &run).await;
    assert_eq!(headers["content-type"], "text/csv; charset=utf-8");
    let digest = Sha256::digest(&file);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        run["sha256"],
        json!(hex),
        "the file is the one the run made"
    );
    assert_eq!(run["byte_size"], json!(file.len()));

    // Python's csv module and DuckDB read it, check every row and each day's continuity.
    let path = std::env::temp_dir().join(format!("rollforward-{}.csv", uuid::Uuid::new_v4()));
    std::fs::write(&path, &file).unwrap();
    let venv = std::process::Command::new("bash")
        .arg(format!("{ROOT}/../tests/venv.sh"))
        .output()
        .expect("tests/venv.sh runs");
    assert!(
        venv.status.success(),
        "{}",
        String::from_utf8_lossy(&venv.stderr)
    );
    let python = format!(
        "{}/bin/python",
        String::from_utf8_lossy(&venv.stdout).trim()
    );
    let out = std::process::Command::new(python)
        .arg(format!("{ROOT}/../tests/reports/read_rollforward.py"))
        .arg(&path)
        .output()
        .expect("the reader runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(read["csv"]["rows"], json!(days * 5));
    assert_eq!(read["duckdb"]["rows"], json!(days * 5));
    assert_eq!(read["duckdb"]["broken_rows"], 0);
    assert_eq!(read["csv"]["liability"], read["duckdb"]["liability"]);

    let mut day = first;
    while day <= last {
        let endpoint = liability_at_end_of(&shop, day).await;
        assert_eq!(
            read["duckdb"]["liability"][day.to_string()],
            json!(endpoint),
            "the closing of {day} is the liability at its end"
        );
        day = day.succ_opt().unwrap();
    }
    // The payment day: 10,000 + 500 + 300 funded, 1,200 paid, 300 refunded.
    assert_eq!(liability_at_end_of(&shop, last).await, 9_900);
    let _ = std::fs::remove_file(&path);

    // The same range in JSON Lines, in a time zone 5:45 ahead: every row still closes.
    let run = run_report(
        &shop,
        json!({"type": "liability_rollforward", "from": first.to_string(), "to": (last - chrono::Duration::days(1)).to_string(),
               "timezone": "Asia/Kathmandu", "format": "jsonl"}),
    )
    .await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let (headers, file) = download(&shop, &run).await;
    assert_eq!(headers["content-type"], "application/jsonl");
    let mut last_closing: BTreeMap<String, i64> = BTreeMap::new();
    for line in String::from_utf8(file).unwrap().lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let moved = moved(&row);
        let (opening, closing) = (
            row["opening_minor"].as_i64().unwrap(),
            row["closing_minor"].as_i64().unwrap(),
        );
        assert_eq!(opening + moved, closing, "{row}");
        let key = row["class"].as_str().unwrap().to_string();
        if let Some(before) = last_closing.insert(key, closing) {
            assert_eq!(before, opening, "{row}");
        }
    }

    // report.ready was fired for the run (once the outbox relayed it).
    let report_id = run["report_id"].clone();
    eventually(
        Duration::from_secs(30),
        "report.ready in the event feed",
        || {
            let report_id = report_id.clone();
            let shop = &shop;
            async move {
                let events = shop.read("/events?event_type=report.ready").await;
                assert_eq!(events.status, 200, "{}", events.body);
                events.body["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e["data"]["report_id"] == report_id)
                    .then_some(())
            }
        },
    )
    .await;
    app.stop().await;
}

#[tokio::test]
async fn a_report_request_is_checked_replayed_and_another_tenants_run_is_not_found() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let base = format!("/{}/reports", shop.tenant.integration_id);
    for (bad, field) in [
        (
            json!({"type": "liability_rollforward", "from": "2026-02-30", "to": "2026-03-01"}),
            "/from",
        ),
        (
            json!({"type": "liability_rollforward", "from": "2026-03-02", "to": "2026-03-01"}),
            "/from",
        ),
        (
            json!({"type": "liability_rollforward", "from": "2024-01-01", "to": "2025-06-01"}),
            "/to",
        ),
        (
            json!({"type": "liability_rollforward", "from": "2026-01-01", "to": "2026-01-02", "timezone": "Mars/Olympus"}),
            "/timezone",
        ),
        (
            json!({"type": "balance_sheet", "from": "2026-01-01", "to": "2026-01-02"}),
            "/type",
        ),
        (
            json!({"type": "liability_rollforward", "from": "2026-01-01", "to": "2026-01-02", "format": "xlsx"}),
            "/format",
        ),
    ] {
        let r = shop.control(&base, bad.clone()).await;
        assert_eq!(r.code(), "VALIDATION_ERROR", "{bad}: {}", r.body);
        assert_eq!(
            r.body["error"]["details"]["fields"][0]["field"], field,
            "{bad}: {}",
            r.body
        );
    }
    let listed = shop.read(&base).await;
    assert_eq!(
        listed.body["data"],
        json!([]),
        "refused requests left no run"
    );

    // A retry with the same key replays the accepted run.
    let key = uuid::Uuid::new_v4().to_string();
    let body = shop
        .body(json!({"type": "liability_rollforward", "from": "2026-01-01", "to": "2026-01-31"}));
    let ask = || {
        tests::send(
            app.post(&base)
                .header("x-api-key", &shop.tenant.platform_key)
                .header("Idempotency-Key", &key)
                .json(&body),
        )
    };
    let first = ask().await;
    assert_eq!(first.status, 202, "{}", first.body);
    let again = ask().await;
    assert_eq!(again.status, 202);
    assert_eq!(again.body["data"], first.body["data"]);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    let id = first.body["data"]["report_id"].as_str().unwrap();
    let listed = shop.read(&base).await;
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 1);

    // Another integration's key: its own path knows no such run; this path is FORBIDDEN.
    let theirs = other
        .read(&format!("/{}/reports/{id}", other.tenant.integration_id))
        .await;
    assert_eq!(theirs.code(), "NOT_FOUND", "{}", theirs.body);
    let foreign_path = other.read(&format!("{base}/{id}")).await;
    assert_eq!(foreign_path.code(), "FORBIDDEN", "{}", foreign_path.body);
    // No worker ran it here: it has no file yet.
    let file = shop.read(&format!("{base}/{id}/file")).await;
    assert_eq!(file.code(), "NOT_FOUND", "{}", file.body);
}

#[tokio::test]
async fn a_run_and_its_file_are_deleted_once_they_expire_and_not_before() {
    // A database of its own: pruning as of a month ahead must touch no other test's runs.
    let app = TestApp::spawn_isolated(true, |c| c.report_retention_days = 2).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    advance_days(&shop, 1).await;
    let yesterday = clock_today(&shop).await.pred_opt().unwrap();
    let run = run_report(
        &shop,
        json!({"type": "liability_rollforward", "from": yesterday.to_string(), "to": yesterday.to_string()}),
    )
    .await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let expires = chrono::DateTime::parse_from_rfc3339(run["expires_at"].as_str().unwrap())
        .unwrap()
        .to_utc();
    let created = chrono::DateTime::parse_from_rfc3339(run["created_at"].as_str().unwrap())
        .unwrap()
        .to_utc();
    assert_eq!((expires - created).num_days(), 2);
    let db = &app.server.state.db;
    let table = api::store::db::retention::Table::ReportRuns;
    let keep = api::jobs::retention::keep(&app.server.state.config, table);
    let path = format!(
        "/{}/reports/{}",
        shop.tenant.integration_id,
        run["report_id"].as_str().unwrap()
    );
    let before = expires - chrono::Duration::seconds(1);
    let pruned = api::store::db::retention::prune_batch(db, table, before, keep, 100)
        .await
        .unwrap();
    assert_eq!(pruned, 0, "not yet expired");
    let (_, file) = download(&shop, &run).await;
    assert!(!file.is_empty(), "the file is still there");
    // The answer shows milliseconds; the run expires within the one after.
    let after = expires + chrono::Duration::milliseconds(1);
    let pruned = api::store::db::retention::prune_batch(db, table, after, keep, 100)
        .await
        .unwrap();
    assert_eq!(pruned, 1);
    assert_eq!(shop.read(&path).await.code(), "NOT_FOUND");
    assert_eq!(shop.read(&format!("{path}/file")).await.code(), "NOT_FOUND");
    app.stop().await;
}
