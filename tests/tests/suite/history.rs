//! Tables that only grow (the outbox, paid OTP sessions) and the look-ups made on them on
//! every call: each must go through an index, whatever the table's size. A walk of the
//! history costs more every day the service runs, and no functional test would notice.
use api::store;
use tests::TestApp;
use uuid::Uuid;

/// The outbox keeps every relayed row as the event history, a paid OTP session is kept as
/// its payment's record, and payments, top-ups, deliveries and offers are kept for good:
/// these tables only grow. The look-ups made on every call go through indexes, never a walk
/// of the history: the relay's poll every 100 ms for the rows still to relay (an index that
/// holds only those), a transaction detail's events, the per-wallet OTP send limit, and the
/// pages of the lists.
#[tokio::test]
async fn look_ups_on_tables_that_only_grow_go_through_indexes() {
    use sea_orm::{ConnectionTrait, DbBackend, QueryTrait, Statement};
    let app = TestApp::spawn().await;
    let db = &app.server.state.db;
    let backend = db.get_database_backend();
    let plan = async |stmt: Statement| {
        let explain = match backend {
            DbBackend::Postgres => "EXPLAIN",
            _ => "EXPLAIN QUERY PLAN",
        };
        let stmt = Statement {
            sql: format!("{explain} {}", stmt.sql),
            ..stmt
        };
        let rows = db.query_all_raw(stmt).await.unwrap();
        rows.iter()
            .map(|row| match backend {
                DbBackend::Postgres => row.try_get::<String>("", "QUERY PLAN").unwrap(),
                _ => row.try_get::<String>("", "detail").unwrap(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    let poll = Statement::from_sql_and_values(
        backend,
        store::outbox::relay::pending_select(backend),
        [100i64.into()],
    );
    let poll = plan(poll).await;
    assert!(
        poll.contains("ix_outbox_unrelayed"),
        "the relay's poll does not use the index of pending rows:\n{poll}"
    );

    let events =
        store::outbox::events_of_select("payment", &Uuid::now_v7().to_string()).build(backend);
    let events = plan(events).await;
    assert!(
        events.contains("ix_outbox_resource"),
        "a resource's events are not found through their index:\n{events}"
    );

    let since = chrono::Utc::now() - chrono::Duration::minutes(10);
    let sends = store::payments::otp_sends_for_wallet_select(Uuid::now_v7(), since).build(backend);
    let sends = plan(sends).await;
    assert!(
        sends.contains("ix_otp_sessions_wallet"),
        "a wallet's OTP sends are not found through their index:\n{sends}"
    );

    // Lists read a page, newest first: the index gives the order, so the limit stops the
    // read instead of sorting the whole history first.
    let feed = store::payments::TransactionFilter {
        integration_id: Uuid::now_v7(),
        status: None,
        kind: None,
        from: None,
        to: None,
        branch_id: None,
        merchant_id: None,
        branch_ids: None,
    };
    let one = Uuid::now_v7();
    let lists = [
        (
            "ix_payments_integration",
            store::payments::transactions_select(&feed, None, 51).build(backend),
        ),
        (
            "ix_payment_refunds_integration",
            store::payments::reversals_select(&feed, None, 51).build(backend),
        ),
        (
            "ix_topups_integration",
            store::topups::transactions_select(&feed, &["credited", "reversed"], None, 51)
                .build(backend),
        ),
        (
            "ix_topup_reversals_integration",
            store::disputes::reversals_select(&feed, None, 51).build(backend),
        ),
        (
            "ix_payments_wallet_id",
            store::payments::recent_of_wallet_select(one, 1).build(backend),
        ),
        (
            "ix_webhook_deliveries_subscription",
            store::webhooks::deliveries_select(one, None, None, None, 51).build(backend),
        ),
        (
            "ix_offers_merchant",
            store::incentives::offers_select(one, None, None, None, 51).build(backend),
        ),
    ];
    for (index, query) in lists {
        let sql = query.sql.clone();
        let plan = plan(query).await;
        assert!(
            plan.contains(index),
            "{sql}\nis not read through {index}:\n{plan}"
        );
        // Partitioned on PostgreSQL: every partition through its own copy of the index.
        assert!(
            !plan.contains("Seq Scan"),
            "{sql}\nreads a table whole:\n{plan}"
        );
    }
}
