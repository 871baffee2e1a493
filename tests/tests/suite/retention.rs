//! Retention: every table that grows with traffic and holds no money fact is pruned in
//! batches once its rows have outlived their use; the ledger, payments and wallets never are.
use super::payments::otp_for;
use api::store::db::retention::Table;
use chrono::{Duration, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::json;
use tests::{TestApp, shop::Shop, webhooks::Receiver};

async fn count(app: &TestApp, sql_table: &str, filter: &str) -> i64 {
    let db = &app.server.state.db;
    let table = match (sql_table, db.get_database_backend()) {
        ("jobs", DbBackend::Postgres) => "apalis.jobs",
        ("jobs", _) => "Jobs",
        (t, _) => t,
    };
    let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE {filter}");
    let row = db
        .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("count")
        .expect("a row");
    row.try_get::<i64>("", "n").expect("n")
}

const NEVER_PRUNED: [&str; 5] = [
    "ledger_entries",
    "ledger_postings",
    "payments",
    "wallets",
    "operator_audit_log",
];

#[tokio::test]
async fn each_growing_table_is_pruned_in_batches_and_no_money_record_ever_is() {
    let app = TestApp::spawn_isolated(true, |c| c.retention_batch_rows = 10).await;
    let shop = Shop::open(&app).await;
    let receiver = Receiver::ok().await;
    tests::shop::subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;

    // Traffic: payments by QR (used nonces), one by OTP (a used session), unused QR nonces
    // and OTP sessions, SMS jobs, sandbox messages, webhook deliveries and their attempts.
    let c = shop.customer().await;
    assert_eq!(shop.fund(&c, 10_000).await.status, 200);
    for _ in 0..3 {
        let r = shop.pay(&c, 10).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let (session, code) = otp_for(&shop, &c, 10, "PAID").await;
    let r = shop
        .post(
            "/payments",
            json!({
                "credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                "amount_minor": 10, "currency": "EUR", "order_ref": "PAID",
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for i in 0..4 {
        otp_for(&shop, &c, 10, &format!("UNUSED-{i}")).await;
    }
    for _ in 0..12 {
        shop.qr(&c).await;
    }
    tests::eventually(
        std::time::Duration::from_secs(30),
        "four webhook deliveries",
        || async { (receiver.accepted_event_ids().len() >= 4).then_some(()) },
    )
    .await;
    tests::eventually(
        std::time::Duration::from_secs(30),
        "no job left to run",
        || async {
            (count(&app, "jobs", "status IN ('Pending', 'Queued', 'Running')").await == 0)
                .then_some(())
        },
    )
    .await;

    let mut kept_for_ever = vec![];
    for t in NEVER_PRUNED {
        kept_for_ever.push((t, count(&app, t, "1 = 1").await));
    }
    let paid_otp = count(&app, "otp_sessions", "payment_id IS NOT NULL").await;
    let paid_qr = count(&app, "qr_nonces", "payment_id IS NOT NULL").await;
    assert_eq!((paid_otp, paid_qr), (1, 3));
    let prunable = [
        (
            Table::FinishedJobs,
            "jobs",
            "(status IN ('Done', 'Killed') OR (status = 'Failed' AND attempts >= max_attempts))",
        ),
        (Table::OutboxEvents, "outbox", "relayed_at IS NOT NULL"),
        (Table::IdempotencyRecords, "idempotency_records", "1 = 1"),
        (Table::OtpSessions, "otp_sessions", "payment_id IS NULL"),
        (Table::QrNonces, "qr_nonces", "payment_id IS NULL"),
        (
            Table::WebhookDeliveries,
            "webhook_deliveries",
            "state IN ('DELIVERED', 'DEAD')",
        ),
        (Table::WebhookAttempts, "webhook_attempts", "1 = 1"),
        (Table::SandboxMessages, "sandbox_messages", "1 = 1"),
    ];
    let mut before = vec![];
    for (table, sql_table, filter) in prunable {
        let n = count(&app, sql_table, filter).await;
        assert!(n > 0, "the traffic left no {sql_table} to prune");
        before.push((table, sql_table, n));
    }
    let qr = before.iter().find(|b| b.0 == Table::QrNonces).unwrap().2;
    assert!(qr > 10, "more unused QR nonces ({qr}) than one batch holds");

    // Today nothing has outlived its use.
    let today = api::jobs::retention::run_once(&app.server.state, Utc::now()).await;
    for (table, done) in &today {
        assert_eq!(
            done.as_ref().ok(),
            Some(&0),
            "{table:?} pruned rows still in use"
        );
    }

    // Ten years on, every one of them has. On PostgreSQL the outbox goes by whole months,
    // each once it has ended by the database's clock too, which no test can move
    // (`suite::partitions` has months that ended): here it stays.
    let by_month = app.server.state.db.get_database_backend() == DbBackend::Postgres;
    let later = Utc::now() + Duration::days(3650);
    let pass = api::jobs::retention::run_once(&app.server.state, later).await;
    for (table, sql_table, n) in before {
        let (_, done) = pass.iter().find(|(t, _)| *t == table).unwrap();
        let gone = if by_month && table == Table::OutboxEvents {
            0
        } else {
            n
        };
        assert_eq!(
            done.as_ref().ok(),
            Some(&(gone as u64)),
            "{sql_table}: deleted"
        );
        let (_, _, filter) = prunable.iter().find(|p| p.0 == table).unwrap();
        assert_eq!(
            count(&app, sql_table, filter).await,
            n - gone,
            "{sql_table}: left"
        );
    }
    assert_eq!(
        count(&app, "otp_sessions", "payment_id IS NOT NULL").await,
        1,
        "an OTP session that paid is part of its payment"
    );
    assert_eq!(count(&app, "qr_nonces", "payment_id IS NOT NULL").await, 3);
    for (t, n) in kept_for_ever {
        assert_eq!(count(&app, t, "1 = 1").await, n, "{t} was pruned");
    }
    let report =
        api::domain::operators::check_ledger(&app.server.state.db, "retention test", None, false)
            .await
            .unwrap();
    assert!(report.is_consistent(), "{report:?}");
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        json!(10_000 - 4 * 10),
        "the balance is what the ledger says, history pruned or not"
    );

    // The metrics say what each table lost.
    let scrape = reqwest::get(format!("http://{}/metrics", app.server.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        scrape.contains("wallet_retention_deleted_rows_total{table=\"qr_nonces\"}"),
        "{scrape}"
    );
    assert!(scrape.contains("wallet_retention_last_success_timestamp_seconds{table=\"jobs\"}"));
    app.stop().await;
}
