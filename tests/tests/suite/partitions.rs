//! History partitioned by month on PostgreSQL (docs/scaling.md, section 4): payments, ledger
//! entries and the outbox each write into the month their UUIDv7 key was taken in, the
//! months ahead are there before they are needed, a look-up by id reads one partition, a
//! newest-first page reads the partitions newest first, and an outbox month past retention
//! goes whole, never while one of its rows still waits for the relay.
use api::store::db::partitions::{self, MONTHS_AHEAD};
use chrono::{DateTime, Duration, Utc};
use migration::{
    MigratorTrait,
    partitions::{ALL, LEDGER_ENTRIES, OUTBOX, PAYMENTS, month_start, partition_name},
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryTrait, Statement};
use tests::{Mode, TestApp, mode, shop::Shop};
use uuid::Uuid;

fn production() -> bool {
    if mode() != Mode::Production {
        eprintln!("production mode only: SQLite has no partitions");
        return false;
    }
    true
}

async fn text(db: &impl ConnectionTrait, sql: String) -> String {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap()
        .expect("a row");
    row.try_get::<String>("", "v").unwrap()
}

/// The partition of `table` a row of key `key` is in.
async fn home(db: &impl ConnectionTrait, table: &str, key: &str, value: Uuid) -> String {
    text(
        db,
        format!(
            "SELECT tableoid::regclass::text AS v FROM {table} WHERE {key} = '{value}' LIMIT 1"
        ),
    )
    .await
}

/// The partition a key taken now belongs in: the month's own, or the initial one while
/// that still reaches past now (the database was converted this month).
async fn expected_home(db: &impl ConnectionTrait, table: &str, now: DateTime<Utc>) -> String {
    let initial = format!("{table}_p_initial");
    let found = partitions::partitions_of(db, table).await.unwrap();
    match found
        .iter()
        .find(|p| p.name == initial)
        .and_then(|p| p.upper)
    {
        Some(upper) if upper > now => initial,
        _ => partition_name(table, month_start(now, 0)),
    }
}

async fn plan(db: &impl ConnectionTrait, stmt: Statement) -> String {
    let stmt = Statement {
        sql: format!("EXPLAIN {}", stmt.sql),
        ..stmt
    };
    db.query_all_raw(stmt)
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get::<String>("", "QUERY PLAN").unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn each_write_lands_in_its_month_and_the_months_ahead_are_there() {
    if !production() {
        return;
    }
    let app = TestApp::spawn().await;
    let db = &app.server.state.db;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let now = Utc::now();
    let pay = shop.pay(&c, 250).await;
    assert_eq!(pay.status, 200, "{}", pay.body);
    let payment_id: Uuid = pay.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    for p in ALL {
        assert!(
            migration::partitions::is_partitioned(db, p.table)
                .await
                .unwrap(),
            "{} is not partitioned",
            p.table
        );
    }
    assert_eq!(
        home(db, PAYMENTS.table, PAYMENTS.key, payment_id).await,
        expected_home(db, PAYMENTS.table, now).await
    );
    let posting = text(
        db,
        format!("SELECT posting_id::text AS v FROM payments WHERE id = '{payment_id}'"),
    )
    .await;
    assert_eq!(
        home(
            db,
            LEDGER_ENTRIES.table,
            LEDGER_ENTRIES.key,
            posting.parse().unwrap()
        )
        .await,
        expected_home(db, LEDGER_ENTRIES.table, now).await
    );
    let event = text(
        db,
        format!(
            "SELECT event_id::text AS v FROM outbox WHERE resource_id = '{payment_id}' LIMIT 1"
        ),
    )
    .await;
    assert_eq!(
        home(db, OUTBOX.table, OUTBOX.key, event.parse().unwrap()).await,
        expected_home(db, OUTBOX.table, now).await
    );

    // Upkeep keeps the months ahead; run again, it creates nothing.
    api::jobs::retention::partition_upkeep(&app.server.state, now)
        .await
        .unwrap();
    assert_eq!(
        partitions::months_ahead(db, now).await.unwrap(),
        Some(MONTHS_AHEAD)
    );
    assert!(partitions::ensure(db, now).await.unwrap().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_look_up_by_id_reads_one_partition_and_a_page_reads_them_newest_first() {
    if !production() {
        return;
    }
    let app = TestApp::spawn().await;
    let db = &app.server.state.db;
    let id = Uuid::now_v7();
    let by_id = plan(
        db,
        entities::payment::Entity::find_by_id(id).build(DbBackend::Postgres),
    )
    .await;
    let scanned: Vec<&str> = by_id
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            w.strip_prefix("payments_p").is_some_and(|m| {
                m == "_initial" || (m.len() == 6 && m.chars().all(|c| c.is_ascii_digit()))
            })
        })
        .collect();
    assert_eq!(
        scanned.len(),
        1,
        "a look-up by id reads one partition:\n{by_id}"
    );

    let feed = api::store::payments::TransactionFilter {
        integration_id: Uuid::now_v7(),
        ..Default::default()
    };
    let page = plan(
        db,
        api::store::payments::transactions_select(&feed, Some(id), 51).build(DbBackend::Postgres),
    )
    .await;
    // An Append in key order with the limit above it, each partition through its index:
    // no partition's rows are sorted, none is read whole.
    assert!(!page.contains("Sort"), "{page}");
    assert!(!page.contains("Seq Scan"), "{page}");
    assert!(
        page.contains("Index Scan Backward using ix_payments_integration"),
        "{page}"
    );
    app.stop().await;
}

/// A scratch database of its own, migrated up to (not including) the partitioning: a
/// direct connection, and the service's (through PgBouncer in the scaled mode, where the
/// upkeep's DETACH .. CONCURRENTLY must pass through it too).
async fn before_partitioning() -> (DatabaseConnection, api::store::Db) {
    let (db, served) = tests::scratch_database().await;
    migration::Migrator::up(&db, Some(19)).await.unwrap();
    (db, served)
}

fn v7_at(t: DateTime<Utc>) -> Uuid {
    Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        t.timestamp() as u64,
        t.timestamp_subsec_nanos(),
    ))
}

async fn outbox_row(db: &DatabaseConnection, at: DateTime<Utc>, relayed: bool) -> Uuid {
    let id = v7_at(at);
    let relayed_at = if relayed { "now()" } else { "NULL" };
    db.execute_unprepared(&format!(
        "INSERT INTO outbox (event_id, kind, topic, resource_type, resource_id, \
         sequence_number, payload, occurred_at, created_at, relayed_at) \
         VALUES ('{id}', 'event', 'payment.completed', 'payment', '{id}', 1, '{{}}', \
         '{at}', '{at}', {relayed_at})",
        at = at.to_rfc3339()
    ))
    .await
    .unwrap();
    id
}

async fn outbox_count(db: &DatabaseConnection) -> i64 {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT COUNT(*) AS n FROM outbox",
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "n").unwrap()
}

#[tokio::test]
async fn an_outbox_month_past_retention_goes_whole_once_every_row_is_relayed() {
    if !production() {
        return;
    }
    let (db, served) = before_partitioning().await;
    let now = Utc::now();
    let keep = Duration::days(31);
    // Rows from before partitioning: one relayed, one the relay has not sent yet.
    let old = now - Duration::days(100);
    outbox_row(&db, old, true).await;
    let waiting = outbox_row(&db, old, false).await;
    // Partitioned then, a hundred days ago: the initial partition ends with that month.
    migration::partitions::convert(&db, OUTBOX, old)
        .await
        .unwrap();
    // The first month after it ended 38 days ago at the latest.
    let next_month = month_start(old, 1);
    let then = outbox_row(&db, next_month + Duration::days(1), true).await;
    let today = outbox_row(&db, now, true).await;
    assert_eq!(
        home(&db, "outbox", "event_id", then).await,
        partition_name("outbox", next_month)
    );

    // That month has ended more than 31 days ago: it goes. The initial partition has too,
    // but holds a row the relay still owes: it stays.
    let dropped = partitions::drop_outbox_before(&served, now, keep)
        .await
        .unwrap();
    assert_eq!(dropped, 1);
    assert_eq!(outbox_count(&db).await, 3);
    let names: Vec<String> = partitions::partitions_of(&served, "outbox")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert!(names.contains(&"outbox_p_initial".to_string()), "{names:?}");
    assert!(
        !names.contains(&partition_name("outbox", next_month)),
        "{names:?}"
    );

    db.execute_unprepared(&format!(
        "UPDATE outbox SET relayed_at = now() WHERE event_id = '{waiting}'"
    ))
    .await
    .unwrap();
    assert_eq!(
        partitions::drop_outbox_before(&served, now, keep)
            .await
            .unwrap(),
        2
    );
    assert_eq!(outbox_count(&db).await, 1, "today's row stays");
    assert_eq!(
        home(&db, "outbox", "event_id", today).await,
        partition_name("outbox", month_start(now, 0))
    );

    // A worker whose clock runs a year ahead drops nothing the database's clock still keeps.
    let ahead = now + Duration::days(365);
    assert_eq!(
        partitions::drop_outbox_before(&served, ahead, keep)
            .await
            .unwrap(),
        0
    );
    assert_eq!(outbox_count(&db).await, 1);

    // The migration partitions the rest and leaves the outbox as it is; writes go on.
    migration::Migrator::up(&db, None).await.unwrap();
    for p in ALL {
        assert!(
            migration::partitions::is_partitioned(&db, p.table)
                .await
                .unwrap()
        );
    }
    outbox_row(&db, Utc::now(), false).await;
    assert_eq!(outbox_count(&db).await, 2);
    db.close().await.unwrap();
}

#[tokio::test]
async fn rows_from_before_partitioning_stay_where_they_are_and_ids_carry_on() {
    if !production() {
        return;
    }
    let (db, _) = before_partitioning().await;
    let before = outbox_row(&db, Utc::now() - Duration::days(3), true).await;
    let last_id = text(&db, "SELECT id::text AS v FROM outbox".into()).await;
    // Up through the partitioning (000020 and 000021) alone, so that going down two below
    // undoes exactly those whatever migrations come later.
    migration::Migrator::up(&db, Some(2)).await.unwrap();
    assert_eq!(
        home(&db, "outbox", "event_id", before).await,
        "outbox_p_initial"
    );
    let after = outbox_row(&db, Utc::now(), true).await;
    let next_id = text(
        &db,
        format!("SELECT id::text AS v FROM outbox WHERE event_id = '{after}'"),
    )
    .await;
    assert!(
        next_id.parse::<i64>().unwrap() > last_id.parse::<i64>().unwrap(),
        "the outbox's ids carry on from {last_id}, not from 1 ({next_id})"
    );
    // Taken back down past the partitioning (000021, then 000020), every row is in one
    // plain table again; and up once more.
    migration::Migrator::down(&db, Some(2)).await.unwrap();
    assert!(
        !migration::partitions::is_partitioned(&db, "outbox")
            .await
            .unwrap()
    );
    assert_eq!(outbox_count(&db).await, 2);
    migration::Migrator::up(&db, None).await.unwrap();
    assert!(
        migration::partitions::is_partitioned(&db, "outbox")
            .await
            .unwrap()
    );
    assert_eq!(outbox_count(&db).await, 2);
    db.close().await.unwrap();
}
