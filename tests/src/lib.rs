//! Test harness: start the real service on port 0 against this run's database, onboard a
//! fresh tenant per test, and talk HTTP to it.
//!
//! The mode comes from `WALLET_TEST_MODE`: `embedded` (default; a SQLite file in a temp
//! dir) or `production` (a fresh PostgreSQL database created on
//! `WALLET_TEST_DATABASE_URL`, plus Redis at `WALLET_TEST_REDIS_URL`). Each test run gets
//! its own database and Redis key prefix; each test its own tenant, so tests run in
//! parallel.
//!
//! Production mode can also run the scaled topology (`tests/scaled/up.sh`): with
//! `WALLET_TEST_POOLER_URL` (PgBouncer in transaction mode in front of the server at
//! `WALLET_TEST_DATABASE_URL`), the service reaches its database through the pooler and
//! keeps the direct URL for migrations and the job queue; with `WALLET_TEST_REPLICA_URL` (a
//! streaming replica of that server), the lag-tolerant reads go there.
pub mod browser;
pub mod cluster;
pub mod dead_letters;
pub mod finance;
pub mod oas31;
pub mod otlp;
pub mod paying;
pub mod procs;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_server;
mod reply;
pub use reply::{Reply, send};
pub mod shop;
pub mod webhooks;

use std::{
    path::PathBuf,
    sync::OnceLock,
    time::{Duration, Instant},
};

use api::{config::Config, domain::platform::tenancy};
use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Embedded,
    Production,
}

pub fn mode() -> Mode {
    match std::env::var("WALLET_TEST_MODE").as_deref() {
        Ok("production") => Mode::Production,
        Ok("embedded") | Err(_) => Mode::Embedded,
        Ok(other) => panic!("WALLET_TEST_MODE must be embedded or production, not {other}"),
    }
}

struct Run {
    database_url: String,
    /// The same database reached directly, when `database_url` goes through a pooler.
    direct_url: Option<String>,
    redis_url: Option<String>,
    redis_prefix: String,
    data_dir: PathBuf,
}

fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The database and prefix of this test run, created and migrated once per process.
fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        install_tls();
        let id = format!("{}_{}", std::process::id(), Uuid::new_v4().simple().to_string().get(..8).unwrap_or("0"));
        let data_dir = std::env::temp_dir().join(format!("wallet-test-{id}"));
        std::fs::create_dir_all(&data_dir).expect("temp dir");
        let (database_url, direct_url, redis_url) = match mode() {
            Mode::Embedded => (
                format!("sqlite://{}?mode=rwc", data_dir.join("wallet.db").display()),
                None,
                None,
            ),
            Mode::Production => {
                let base = std::env::var("WALLET_TEST_DATABASE_URL").expect(
                    "production mode tests need WALLET_TEST_DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/postgres)",
                );
                let redis = std::env::var("WALLET_TEST_REDIS_URL")
                    .expect("production mode tests need WALLET_TEST_REDIS_URL (e.g. redis://127.0.0.1:6379)");
                let name = format!("wallet_test_{id}");
                let url = create_database(&base, &name);
                let (url, direct) = through_pooler(url, &name);
                (url, direct, Some(redis))
            }
        };
        let run = Run {
            database_url,
            direct_url,
            redis_url,
            redis_prefix: format!("wallet-test:{id}:"),
            data_dir,
        };
        // Migrate on a runtime of its own: each #[tokio::test] has its own runtime, and a
        // pool must not outlive the runtime that made it.
        let cfg = config_for(&run);
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .expect("runtime")
                .block_on(api::migrate(&cfg))
                .expect("migrations apply")
        })
        .join()
        .expect("migration thread");
        run
    })
}

/// Creates the empty database `name` on the server of `base` (a PostgreSQL URL) and
/// returns its URL.
pub fn create_database(base: &str, name: &str) -> String {
    let base_owned = base.to_string();
    let name2 = name.to_string();
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(async move {
                use sea_orm::ConnectionTrait;
                let db = sea_orm::Database::connect(&base_owned)
                    .await
                    .expect("connect to the test PostgreSQL");
                db.execute_unprepared(&format!("CREATE DATABASE {name2}"))
                    .await
                    .expect("create test database");
                db.close().await.ok();
            })
    })
    .join()
    .expect("create-database thread");
    match base.rsplit_once('/') {
        Some((server, _db)) => format!("{server}/{name}"),
        None => panic!("WALLET_TEST_DATABASE_URL needs a database path"),
    }
}

/// The URL the service gets for database `name` (direct at `url`): through the pooler at
/// `WALLET_TEST_POOLER_URL` when set, with the direct URL beside it.
fn through_pooler(url: String, name: &str) -> (String, Option<String>) {
    match std::env::var("WALLET_TEST_POOLER_URL") {
        Ok(pooler) if !pooler.is_empty() => (
            format!("{}/{name}", pooler.trim_end_matches('/')),
            Some(url),
        ),
        _ => (url, None),
    }
}

/// Points `cfg` at a database: `url` for the service, `direct` beside it when `url` goes
/// through a transaction-mode pooler, and its streaming replica at `WALLET_TEST_REPLICA_URL`
/// in the scaled mode.
fn point_at(cfg: &mut Config, url: String, direct: Option<String>) {
    cfg.database_replica_url = match std::env::var("WALLET_TEST_REPLICA_URL") {
        Ok(replica) if !replica.is_empty() => {
            let name = url.rsplit('/').next().unwrap_or_default();
            Some(format!("{}/{name}", replica.trim_end_matches('/')))
        }
        _ => None,
    };
    cfg.database_pooler = if direct.is_some() {
        api::config::Pooler::Transaction
    } else {
        api::config::Pooler::None
    };
    cfg.database_url = Some(url);
    cfg.database_direct_url = direct;
}

fn config_for(run: &Run) -> Config {
    let mut cfg = Config {
        redis_url: run.redis_url.clone(),
        // WALLET_TEST_REDIS_MODE=cluster: WALLET_TEST_REDIS_URL lists a cluster's seeds.
        redis_mode: match std::env::var("WALLET_TEST_REDIS_MODE").as_deref() {
            Ok("cluster") => api::config::RedisMode::Cluster,
            _ => api::config::RedisMode::Standalone,
        },
        listen_addr: "127.0.0.1:0".into(),
        metrics_listen_addr: Some("127.0.0.1:0".into()),
        data_dir: run.data_dir.clone(),
        jwt_secret: Some(api::infra::secret::Secret::new(
            "test-jwt-secret-0123456789abcdefghijklmnop",
        )),
        secret_key: Some(api::infra::secret::Secret::new(
            "test-sealing-key-0123456789abcdefghijklmnop",
        )),
        redis_prefix: run.redis_prefix.clone(),
        bcrypt_cost: 10,
        job_max_attempts: 3,
        job_backoff_base_ms: 50,
        job_backoff_max_ms: 200,
        job_timeout_ms: 5_000,
        outbox_poll_ms: 50,
        webhook_max_attempts: 4,
        webhook_backoff_base_ms: 100,
        webhook_backoff_max_ms: 400,
        webhook_timeout_ms: 1_000,
        webhook_disable_after_failures: 1_000,
        webhook_disable_after_secs: 0,
        webhook_allow_private_targets: true,
        db_max_connections: 8,
        // Several tests fire 50 requests at once on purpose; admission control has a test
        // of its own (`outages::past_its_running_and_waiting_requests_…`).
        max_inflight_requests: 64,
        max_queued_requests: 64,
        log_format: Some("pretty".into()),
        // Every test reaches the service from 127.0.0.1 and many try wrong operator keys on
        // purpose; the sign-in budget has tests of its own (`suite::console_sign_in`), from
        // addresses of their own.
        ops_sign_in_failures_per_client: 1_000_000,
        ops_sign_in_failures_per_prefix: 1_000_000,
        ..Config::default()
    };
    point_at(&mut cfg, run.database_url.clone(), run.direct_url.clone());
    cfg
}

/// This run's configuration, for tests that start a process or build state themselves.
pub fn test_config() -> Config {
    config_for(run())
}

/// A new empty database on the production run's server: a direct connection for schema
/// work, and the connection the service makes to it (through PgBouncer in the scaled mode).
pub async fn scratch_database() -> (sea_orm::DatabaseConnection, api::store::Db) {
    let base = std::env::var("WALLET_TEST_DATABASE_URL").expect("WALLET_TEST_DATABASE_URL");
    let name = format!("wallet_iso_{}", Uuid::new_v4().simple());
    let direct = create_database(&base, &name);
    let (url, pooled_beside) = through_pooler(direct.clone(), &name);
    let mut cfg = test_config();
    point_at(&mut cfg, url, pooled_beside);
    cfg.database_replica_url = None;
    let served = api::store::connect(&cfg)
        .await
        .expect("the service's connection");
    let direct = sea_orm::Database::connect(direct)
        .await
        .expect("a direct connection");
    (direct, served)
}

pub struct TestApp {
    pub server: api::Server,
    pub client: reqwest::Client,
    pub url: String,
}

/// A tenant made for one test, as `wallet-api tenant create` makes it.
#[derive(Clone, Debug)]
pub struct TestTenant {
    pub integration_id: Uuid,
    pub merchant_id: Uuid,
    pub brand_id: Uuid,
    pub branch_ids: Vec<Uuid>,
    pub wallet_program_id: Uuid,
    pub currency: String,
    pub platform_key: String,
    pub is_sandbox: bool,
}

impl TestApp {
    /// The API only; jobs stay queued.
    pub async fn spawn() -> TestApp {
        Self::spawn_with(false, |_| {}).await
    }

    /// The API and the job workers in this process. Call `stop` at the end of the test so
    /// jobs this worker holds are handed back.
    pub async fn spawn_with_workers() -> TestApp {
        Self::spawn_with(true, |_| {}).await
    }

    /// Like `spawn_with`, on a database of its own: for tests whose job configuration
    /// differs from the run's, so no other test's worker takes their jobs (or they theirs).
    pub async fn spawn_isolated(workers: bool, adjust: impl FnOnce(&mut Config)) -> TestApp {
        let run = run();
        let name = format!("wallet_iso_{}", Uuid::new_v4().simple());
        let (url, direct) = match mode() {
            Mode::Embedded => (
                format!(
                    "sqlite://{}?mode=rwc",
                    run.data_dir.join(format!("{name}.db")).display()
                ),
                None,
            ),
            Mode::Production => {
                let base =
                    std::env::var("WALLET_TEST_DATABASE_URL").expect("WALLET_TEST_DATABASE_URL");
                through_pooler(create_database(&base, &name), &name)
            }
        };
        let mut cfg = config_for(run);
        point_at(&mut cfg, url, direct);
        adjust(&mut cfg);
        api::migrate(&cfg).await.expect("migrations apply");
        Self::start(cfg, workers).await
    }

    pub async fn spawn_with(workers: bool, adjust: impl FnOnce(&mut Config)) -> TestApp {
        let mut cfg = test_config();
        adjust(&mut cfg);
        Self::start(cfg, workers).await
    }

    async fn start(cfg: Config, workers: bool) -> TestApp {
        api::infra::telemetry::init_logging(false);
        let state = api::build_state(cfg).await.expect("state builds");
        let server = api::serve(state, "127.0.0.1:0", workers)
            .await
            .expect("server starts");
        let url = format!("{}/v1", server.url());
        TestApp {
            server,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
            url,
        }
    }

    pub async fn stop(self) {
        self.server.stop().await;
    }

    pub async fn tenant(&self, sandbox: bool) -> TestTenant {
        let new = tenancy::NewTenant {
            name: format!("Test {}", Uuid::new_v4()),
            is_sandbox: sandbox,
            currency: "EUR".into(),
            branches: 2,
        };
        // The whole suite writes one SQLite file in embedded mode; a writer that waited out
        // the busy timeout gets the error the API answers as a retryable 503, and is
        // retried here as a client would.
        let mut attempt = 0;
        let t = loop {
            attempt += 1;
            match tenancy::create(
                &self.server.state.db,
                &new,
                self.server.state.config.bcrypt_cost,
                self.server.state.config.cell.as_deref(),
            )
            .await
            {
                Ok(t) => break t,
                Err(e) if attempt < 3 && e.to_string().contains("database is locked") => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("tenant create: {e:?}"),
            }
        };
        TestTenant {
            integration_id: t.integration_id,
            merchant_id: t.merchant_id,
            brand_id: t.brand_id,
            branch_ids: t.branch_ids,
            wallet_program_id: t.wallet_program_id,
            currency: t.currency,
            platform_key: t.platform_key,
            is_sandbox: t.is_sandbox,
        }
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(format!("{}{path}", self.url))
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.post(format!("{}{path}", self.url))
    }

    pub fn put(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.put(format!("{}{path}", self.url))
    }
}

/// Points a command (the `wallet-api` or `wallet-worker` binary) at this test run's
/// database, and Redis in production mode.
pub fn against_this_run(cmd: std::process::Command) -> std::process::Command {
    against(&test_config(), cmd)
}

/// Points a command at the database (and Redis) `cfg` names: an isolated app's
/// (`TestApp::spawn_isolated`) is `app.server.state.config`.
pub fn against(cfg: &Config, mut cmd: std::process::Command) -> std::process::Command {
    cmd.envs(procs::service_env(cfg));
    if cfg.redis_url.is_none() {
        cmd.env("WALLET_REDIS_URL", "redis://127.0.0.1:6379");
    }
    cmd
}

/// The status `GET /v1/capabilities` answers `key` with: 200 while the key works.
pub async fn key_works(app: &TestApp, key: &str) -> u16 {
    send(app.get("/capabilities").header("x-api-key", key))
        .await
        .status
}

pub mod documented_errors;
pub mod examples;

/// `bash script` in a partner's shell, not this test's: cargo sets variables for a running
/// test (and build scripts read some), and a nested `cargo build` or `cargo run` that saw
/// them would rebuild the dependencies the suite just built. `more` names variables to
/// pass on beside the shell's own.
pub fn partner_shell(script: &std::path::Path, more: &[&str]) -> std::process::Command {
    const KEEP: &[&str] = &[
        "PATH",
        "HOME",
        "USER",
        "TMPDIR",
        "LANG",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "CARGO_HOME",
    ];
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(script).env_clear();
    for (k, v) in std::env::vars_os() {
        if KEEP.iter().chain(more).any(|x| k == *x) {
            cmd.env(k, v);
        }
    }
    cmd
}

/// Polls `check` until it returns Some, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Serves `ep` on a loopback port bound before this returns (no bind-then-rebind race with
/// other tests) and gives the port.
pub async fn serve_endpoint<E: poem::Endpoint + 'static>(ep: E) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let acceptor = poem::listener::TcpAcceptor::from_tokio(listener).expect("acceptor");
    tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(ep));
    port
}

/// Every row of every table (the service's and the queues'), as text: for tests that grep
/// the database for something that must never be stored.
pub async fn dump_database(db: &api::store::Db) -> String {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let backend = db.get_database_backend();
    let tables_sql = match backend {
        DbBackend::Postgres => {
            "SELECT table_schema || '.' || table_name AS t FROM information_schema.tables \
             WHERE table_schema IN ('public', 'apalis') AND table_type = 'BASE TABLE'"
        }
        _ => "SELECT name AS t FROM sqlite_master WHERE type = 'table'",
    };
    let tables = db
        .query_all_raw(Statement::from_string(backend, tables_sql))
        .await
        .expect("list tables");
    let mut out = String::new();
    for row in tables {
        let t: String = row.try_get("", "t").expect("table name");
        let sql = match backend {
            DbBackend::Postgres => format!("SELECT row_to_json(x)::text AS r FROM {t} x"),
            // quote() renders every column, blobs as hex literals; cast blobs to text too.
            _ => format!("SELECT * FROM \"{t}\""),
        };
        let rows = db
            .query_all_raw(Statement::from_string(backend, sql))
            .await
            .expect("dump table");
        for r in rows {
            match backend {
                DbBackend::Postgres => {
                    out.push_str(&r.try_get::<String>("", "r").unwrap_or_default())
                }
                _ => {
                    for col in r.column_names() {
                        if let Ok(v) = r.try_get::<Option<String>>("", &col) {
                            out.push_str(&v.unwrap_or_default());
                        } else if let Ok(v) = r.try_get::<Option<Vec<u8>>>("", &col) {
                            out.push_str(&String::from_utf8_lossy(&v.unwrap_or_default()));
                        } else if let Ok(v) = r.try_get::<Option<i64>>("", &col) {
                            out.push_str(&v.unwrap_or_default().to_string());
                        }
                        out.push('|');
                    }
                }
            }
            out.push('\n');
        }
    }
    out
}
