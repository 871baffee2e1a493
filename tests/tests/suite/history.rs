//! Tables that only grow (the outbox, paid OTP sessions) and the look-ups made on them on
//! every call: each must go through an index, whatever the table's size. A walk of the
//! history costs more every day the service runs, and no functional test would notice.
use api::store;
use tests::TestApp;
use uuid::Uuid;

/// The outbox keeps every relayed row as the event history, and a paid OTP session is kept
/// as its payment's record: these tables only grow. The look-ups made on every call go
/// through indexes, never a walk of the history: the relay's poll every 100 ms for the rows
/// still to relay (an index that holds only those), a transaction detail's events, and the
/// per-wallet OTP send limit.
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
        store::relay::pending_select(backend),
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
}
