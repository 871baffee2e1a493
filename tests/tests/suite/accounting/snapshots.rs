//! Balance snapshots (docs/accounting.md, "Snapshots"): a UTC hour is built once it is
//! sealed, exactly once however many builders run, and the liability and the roll-forward
//! read them and say what the entries alone say, to the cent and the wallet; a snapshot that
//! disagrees with the ledger fails the ledger check until it is dropped and built again.
//! Each test runs on a database of its own: every worker builds every merchant's sealed
//! hours, and these tests say exactly which hours are built when.
use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde_json::{Value, json};
use tests::{TestApp, finance, shop::Shop};

/// Three days of a sandbox: wallets funded, paid from, one drained to zero, one funded
/// late; the clock left on the third day an hour and a half after the last payment, so the
/// hour it fell in is sealed. Returns the first day.
async fn three_days(shop: &Shop<'_>) -> NaiveDate {
    let first = finance::clock_today(shop).await;
    let (a, b, drained) = (
        shop.customer().await,
        shop.customer().await,
        shop.customer().await,
    );
    shop.fund(&a, 10_000).await;
    shop.fund(&b, 4_000).await;
    shop.fund(&drained, 700).await;
    shop.grant(&b, 250, "RELEASED", 10 * 86_400).await;
    assert_eq!(shop.pay(&a, 1_234).await.status, 200);
    finance::advance_days(shop, 1).await;
    assert_eq!(shop.pay(&drained, 700).await.status, 200);
    assert_eq!(shop.pay(&b, 1_000).await.status, 200);
    finance::advance_days(shop, 1).await;
    let late = shop.customer().await;
    shop.fund(&late, 999).await;
    assert_eq!(shop.pay(&a, 66).await.status, 200);
    let r = shop
        .control("/sandbox/clock/advance", json!({"seconds": 90 * 60}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    first
}

/// What a finance reader sees of the days: the liability at the start, middle and end of
/// each and now (every class and the wallets holding any), and the roll-forward in UTC and
/// in two zones whose days straddle UTC days.
async fn observe(shop: &Shop<'_>, first: NaiveDate) -> (Vec<Vec<Value>>, Vec<Vec<Value>>) {
    let now = finance::clock_now(shop).await;
    let last = now.date_naive().pred_opt().unwrap();
    let mut instants: Vec<DateTime<Utc>> = Vec::new();
    let mut d = first.pred_opt().unwrap();
    while d <= now.date_naive() {
        let start = d.and_hms_opt(0, 0, 0).unwrap().and_utc();
        instants.extend([
            start,
            start + Duration::hours(13),
            start + Duration::minutes(13 * 60 + 30),
            finance::end_of(d),
        ]);
        d = d.succ_opt().unwrap();
    }
    instants.retain(|t| *t <= now);
    instants.push(now);
    let mut liability = Vec::new();
    for t in instants {
        liability.push(finance::liability_at(shop, t).await);
    }
    let mut reports = Vec::new();
    for tz in ["UTC", "Pacific/Chatham", "Asia/Kathmandu"] {
        reports.push(
            finance::rows(
                shop,
                json!({"type": "liability_rollforward", "from": first.pred_opt().unwrap().to_string(),
                       "to": last.to_string(), "timezone": tz, "format": "jsonl"}),
            )
            .await,
        );
    }
    (liability, reports)
}

/// The shop's merchant's stored closing rows of the hours from `from` on.
async fn hour_rows_since(shop: &Shop<'_>, from: DateTime<Utc>) -> u64 {
    use entities::ledger_hour_closing::{Column, Entity};
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    Entity::find()
        .filter(Column::MerchantId.eq(shop.merchant()))
        .filter(Column::Hour.gte(from))
        .count(&shop.app.server.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn sealed_hours_are_built_once_and_read_as_the_entries_say() {
    let app = TestApp::spawn_isolated(true, |c| c.snapshot_interval_secs = 86_400).await;
    let shop = Shop::open(&app).await;
    let first = three_days(&shop).await;
    finance::reset_snapshots(&shop).await;
    let from_entries = observe(&shop, first).await;
    assert!(
        from_entries.0.iter().any(|l| !l.is_empty()),
        "the days moved value"
    );

    // Half built: the first day only (as a builder would once the second day's first hour
    // ended, not yet SEAL_MARGIN ago).
    let second = finance::start_of(first.succ_opt().unwrap());
    let midway = second + api::domain::ledger::snapshots::SEAL_MARGIN;
    assert_eq!(finance::build_snapshots(&shop, midway).await, 1);
    assert_eq!(finance::snapshots_built_until(&shop).await, Some(second));
    assert_eq!(observe(&shop, first).await, from_entries, "half built");

    // Every sealed hour: the second day, and the third's up to the last hour that ended
    // SEAL_MARGIN ago (the late payment's among them), never the hour under way.
    let now = finance::clock_now(&shop).await;
    let sealed = api::domain::ledger::snapshots::sealed_until(now);
    let margin = api::domain::ledger::snapshots::SEAL_MARGIN;
    assert!(sealed <= now - margin && now - margin - sealed < Duration::hours(1));
    let written = finance::build_snapshots(&shop, now).await;
    assert_eq!(finance::snapshots_built_until(&shop).await, Some(sealed));
    assert!(
        written >= 2,
        "the second day and the third's sealed hours were built"
    );
    let third = finance::start_of(first + Duration::days(2));
    assert!(
        hour_rows_since(&shop, third).await > 0,
        "the third day's sealed hours were built before it ended"
    );
    assert_eq!(
        finance::build_snapshots(&shop, now).await,
        0,
        "nothing twice"
    );
    assert_eq!(observe(&shop, first).await, from_entries, "fully built");
    assert!(finance::snapshot_mismatches(&shop).await.is_empty());

    // Builders on many workers at once: each hour written once, the same rows.
    finance::reset_snapshots(&shop).await;
    let builds =
        futures::future::join_all((0..4).map(|_| finance::build_snapshots(&shop, now))).await;
    assert_eq!(
        builds.iter().sum::<u32>(),
        written + 1,
        "four builders wrote each hour once: {builds:?}"
    );
    assert_eq!(finance::snapshots_built_until(&shop).await, Some(sealed));
    assert!(finance::snapshot_mismatches(&shop).await.is_empty());
    assert_eq!(
        observe(&shop, first).await,
        from_entries,
        "built concurrently"
    );
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn a_snapshot_that_disagrees_with_the_ledger_fails_the_check_until_built_again() {
    let app = TestApp::spawn_isolated(true, |c| c.snapshot_interval_secs = 86_400).await;
    let shop = Shop::open(&app).await;
    let first = three_days(&shop).await;
    let now = finance::clock_now(&shop).await;
    finance::build_snapshots(&shop, now).await;
    let right = finance::liability_at(&shop, now).await;

    // A closing row altered behind the service's back (a restore gone wrong, a hand edit).
    use entities::ledger_hour_closing::{Column, Entity};
    use sea_orm::{
        ColumnTrait, EntityTrait, QueryFilter,
        sea_query::{Expr, ExprTrait},
    };
    let changed = Entity::update_many()
        .col_expr(Column::ActualMinor, Expr::col(Column::ActualMinor).add(1))
        .filter(Column::MerchantId.eq(shop.merchant()))
        .filter(Column::Hour.gte(first.and_hms_opt(0, 0, 0).unwrap().and_utc()))
        .filter(Column::Hour.lt(finance::end_of(first)))
        .exec(&app.server.state.db)
        .await
        .unwrap();
    assert!(changed.rows_affected >= 1);
    let mut cmd = std::process::Command::new(tests::procs::binary("wallet-api"));
    cmd.args([
        "ledger",
        "check",
        "--json",
        "--merchant",
        &shop.merchant().to_string(),
    ]);
    let out = tests::against(&app.server.state.config, cmd)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the check fails");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the check prints its report ({e}); it said: {stderr}"));
    assert_eq!(report["wallet_mismatches"], json!([]), "{report}");
    let said = report["snapshot_mismatches"].to_string();
    assert!(said.contains(&first.to_string()), "{said}");

    // Dropped (the CLI), the figures come from the entries again; built again, they agree.
    let mut cmd = std::process::Command::new(tests::procs::binary("wallet-api"));
    cmd.args([
        "ledger",
        "reset-snapshots",
        "--merchant",
        &shop.merchant().to_string(),
    ]);
    let out = tests::against(&app.server.state.config, cmd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(finance::snapshots_built_until(&shop).await, None);
    assert_eq!(finance::liability_at(&shop, now).await, right);
    finance::build_snapshots(&shop, now).await;
    assert!(finance::snapshot_mismatches(&shop).await.is_empty());
    assert_eq!(finance::liability_at(&shop, now).await, right);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}
