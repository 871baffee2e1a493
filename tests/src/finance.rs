//! What the accounting tests do again and again: move a sandbox's test clock, ask for a
//! report and wait for its run, download its file, read the liability at an instant.
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

use crate::{eventually, send, shop::Shop};

/// The sandbox test clock's reading now.
pub async fn clock_now(shop: &Shop<'_>) -> DateTime<Utc> {
    let r = send(
        shop.app
            .get("/sandbox/clock")
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    let now = r.body["data"]["now"].as_str().expect("clock now");
    DateTime::parse_from_rfc3339(now).unwrap().to_utc()
}

/// The sandbox test clock's date now.
pub async fn clock_today(shop: &Shop<'_>) -> NaiveDate {
    clock_now(shop).await.date_naive()
}

/// Moves the sandbox test clock `days` forward (what falls due on the way ends).
pub async fn advance_days(shop: &Shop<'_>, days: i64) {
    let r = shop
        .control(
            "/sandbox/clock/advance",
            serde_json::json!({"seconds": days * 86_400}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Asks for a report (202, pending) and waits for its run to finish; returns the run.
pub async fn run_report(shop: &Shop<'_>, body: Value) -> Value {
    let base = format!("/{}/reports", shop.tenant.integration_id);
    let r = shop.control(&base, body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body["data"]["status"], "pending");
    let id = r.body["data"]["report_id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(90), "the report run", || {
        let path = format!("{base}/{id}");
        async move {
            let r = shop.read(&path).await;
            assert_eq!(r.status, 200, "{}", r.body);
            matches!(
                r.body["data"]["status"].as_str(),
                Some("succeeded" | "failed")
            )
            .then(|| r.body["data"].clone())
        }
    })
    .await
}

/// The file of a run that succeeded, with its headers.
pub async fn download(shop: &Shop<'_>, run: &Value) -> (reqwest::header::HeaderMap, Vec<u8>) {
    let url = run["file_url"]
        .as_str()
        .expect("file_url")
        .trim_start_matches("/v1");
    let r = shop
        .app
        .get(url)
        .header("x-api-key", &shop.tenant.platform_key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let headers = r.headers().clone();
    (headers, r.bytes().await.unwrap().to_vec())
}

/// Runs a report as JSON Lines to success and gives its rows.
pub async fn rows(shop: &Shop<'_>, mut body: Value) -> Vec<Value> {
    body["format"] = serde_json::json!("jsonl");
    let run = run_report(shop, body).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let (_, file) = download(shop, &run).await;
    String::from_utf8(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What a roll-forward row's movement columns add up to (the breakage estimate is not a
/// movement).
pub fn moved(row: &Value) -> i64 {
    row.as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            k.ends_with("_minor")
                && !["opening_minor", "closing_minor", "breakage_estimate_minor"]
                    .contains(&k.as_str())
        })
        .map(|(_, v)| v.as_i64().unwrap())
        .sum()
}

/// The first instant of UTC day `d`.
pub fn start_of(d: NaiveDate) -> DateTime<Utc> {
    d.and_hms_opt(0, 0, 0).unwrap().and_utc()
}

/// The last instant of UTC day `d`.
pub fn end_of(d: NaiveDate) -> DateTime<Utc> {
    d.succ_opt()
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        - chrono::Duration::microseconds(1)
}

/// `GET /{integrationId}/liability?as_of=<at>`'s lines.
pub async fn liability_at(shop: &Shop<'_>, at: DateTime<Utc>) -> Vec<Value> {
    let r = shop
        .read(&format!(
            "/{}/liability?as_of={}",
            shop.tenant.integration_id,
            at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["merchants"].as_array().unwrap().clone()
}

/// Builds the shop's merchant's snapshots of the hours sealed at `now` (as a worker's
/// builder would); returns the pieces (a UTC day's hours, or fewer) written.
pub async fn build_snapshots(shop: &Shop<'_>, now: DateTime<Utc>) -> u32 {
    api::domain::ledger::snapshots::build(&shop.app.server.state.db, shop.merchant(), now, 10_000)
        .await
        .expect("the snapshots build")
}

/// Up to where the shop's merchant's snapshots are built, if anywhere.
pub async fn snapshots_built_until(shop: &Shop<'_>) -> Option<DateTime<Utc>> {
    api::store::ledger::snapshots::mark(&shop.app.server.state.db, shop.merchant())
        .await
        .expect("the mark reads")
        .flatten()
}

/// Drops the shop's merchant's snapshots, as `wallet-api ledger reset-snapshots` does.
pub async fn reset_snapshots(shop: &Shop<'_>) {
    api::domain::operators::reset_snapshots(
        &shop.app.server.state.db,
        "tests",
        Some(shop.merchant()),
    )
    .await
    .expect("the snapshots drop");
}

/// Where the stored snapshots of the shop's merchant disagree with the ledger.
pub async fn snapshot_mismatches(shop: &Shop<'_>) -> Vec<String> {
    api::domain::ledger::snapshots::verify(&shop.app.server.state.db, shop.merchant())
        .await
        .expect("the snapshots verify")
}
