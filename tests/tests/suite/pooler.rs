//! Through PgBouncer in transaction mode (docs/scaling.md, section 1): nothing the service
//! leaves on a server session outlives its transaction. Runs in the scaled mode, where the
//! run's database is reached through the pooler (`WALLET_TEST_POOLER_URL`).
use api::config::Pooler;
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use tests::TestApp;

/// The run's database URL through the pooler, in the scaled mode.
fn pooled_url() -> Option<String> {
    let cfg = tests::test_config();
    (cfg.database_pooler == Pooler::Transaction).then(|| cfg.database_url.unwrap())
}

/// A client with sqlx's defaults but for the one startup parameter PgBouncer 1.18 refuses.
async fn plain_client(url: &str) -> sea_orm::DatabaseConnection {
    let mut opts = sea_orm::ConnectOptions::new(url);
    opts.max_connections(1)
        .sqlx_logging(false)
        .map_sqlx_postgres_opts(|o| o.extra_float_digits(None));
    Database::connect(opts).await.unwrap()
}

fn select(sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// The control: a client with sqlx's defaults (cached, named statements outside
/// transactions) breaks through this pooler, so the tests below can tell.
#[tokio::test]
async fn a_client_that_keeps_statements_on_its_session_breaks_through_the_pooler() {
    let Some(url) = pooled_url() else {
        eprintln!("scaled mode only: needs WALLET_TEST_POOLER_URL");
        return;
    };
    let (a, b) = (plain_client(&url).await, plain_client(&url).await);
    let mut broke = None;
    for i in 0..50i64 {
        for (name, c) in [("a", &a), ("b", &b)] {
            // A different statement per client and round: a name one client left on a
            // session means another statement to the next client there.
            let sql = format!("SELECT $1::bigint + {i} AS n /* {name} */");
            if let Err(e) = c.query_one_raw(select(&sql, vec![i.into()])).await {
                broke = Some(e.to_string());
            }
        }
    }
    let broke = broke.expect("two plain clients shared sessions through the pooler unharmed");
    assert!(
        broke.contains("prepared statement"),
        "the failure is the named statements': {broke}"
    );
}

/// Every transaction opens clean (`DEALLOCATE ALL`) with the service's own timeouts, which
/// the pooler will not pass on as startup options.
#[tokio::test]
async fn every_transaction_through_the_pooler_starts_clean_with_the_services_timeouts() {
    let Some(url) = pooled_url() else {
        eprintln!("scaled mode only: needs WALLET_TEST_POOLER_URL");
        return;
    };
    let app = TestApp::spawn_with(false, |c| c.db_statement_timeout_ms = 4_321).await;
    let db = &app.server.state.db;
    assert!(db.is_pooled());
    // Sessions of the pooler left dirty by a plain client's named statements.
    let plain = plain_client(&url).await;
    for i in 0..20i64 {
        let sql = format!("SELECT $1::bigint AS n /* leftover {i} */");
        let _ = plain.query_one_raw(select(&sql, vec![i.into()])).await;
    }
    for _ in 0..20 {
        let row = db
            .query_one_raw(select(
                "SELECT (SELECT count(*) FROM pg_prepared_statements) AS statements, \
                 current_setting('statement_timeout') AS statement_timeout, \
                 current_setting('lock_timeout') AS lock_timeout, $1::int AS one",
                vec![1i32.into()],
            ))
            .await
            .expect("a read through the pooler");
        let row = row.expect("one row");
        let statements: i64 = row.try_get("", "statements").unwrap();
        let timeout: String = row.try_get("", "statement_timeout").unwrap();
        let lock: String = row.try_get("", "lock_timeout").unwrap();
        assert_eq!(
            statements, 1,
            "only this read's own statement is on its session"
        );
        assert_eq!(timeout, "4321ms");
        assert_eq!(lock, "2s");
    }
    // A write transaction opens the same way.
    let txn = api::store::begin(db).await.unwrap();
    let row = txn
        .query_one_raw(select(
            "SELECT current_setting('statement_timeout') AS t, $1::int AS one",
            vec![1i32.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.try_get::<String>("", "t").unwrap(), "4321ms");
    txn.rollback().await.unwrap();
    app.stop().await;
}

/// A command pointed at the pooler without being told so (no `WALLET_DATABASE_POOLER`)
/// fails: PgBouncer refuses the session settings a direct connection sends at start-up, or
/// (a pooler that ignores them) sqlx's named statements meet another client's sooner or
/// later, the first run often passing. Whichever it meets, the command names the setting to
/// change rather than only PostgreSQL's words.
#[tokio::test]
async fn a_command_not_told_of_the_pooler_names_the_setting_when_it_breaks() {
    let Some(url) = pooled_url() else {
        eprintln!("scaled mode only: needs WALLET_TEST_POOLER_URL");
        return;
    };
    // Named statements left on the pooler's server sessions, as by any client without the
    // setting.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(plain_client(&url).await);
    }
    for i in 0..8i64 {
        for c in &clients {
            let _ = c
                .query_one_raw(select(&format!("SELECT $1::bigint + {i}"), vec![i.into()]))
                .await;
        }
    }
    let mut env = tests::procs::service_env(&tests::test_config());
    env.retain(|(k, _)| k != "WALLET_DATABASE_POOLER" && k != "WALLET_DATABASE_DIRECT_URL");
    let mut broke = Vec::new();
    for _ in 0..10 {
        let env = env.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(tests::procs::binary("wallet-api"))
                .args(["ledger", "check", "--json"])
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .envs(env)
                .output()
                .expect("wallet-api runs")
        })
        .await
        .unwrap();
        if !out.status.success() {
            broke.push(String::from_utf8_lossy(&out.stderr).to_string());
            if broke.len() >= 2 {
                break;
            }
        }
    }
    assert!(
        !broke.is_empty(),
        "ten runs through the pooler without the setting all passed"
    );
    for said in &broke {
        assert!(
            said.contains("WALLET_DATABASE_POOLER=transaction"),
            "the failure names the setting: {said}"
        );
    }
}
