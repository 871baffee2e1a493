//! Building the shared state and running the HTTP server (and, where configured, the job
//! workers) from a `Config`.
use std::{net::SocketAddr, sync::Arc, time::Duration};

use migration::MigratorTrait;
use poem::listener::TcpAcceptor;
use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};
use tokio::{sync::oneshot, task::JoinHandle};

use crate::{
    config::{Config, Mode, ServiceProcess},
    domain::credentials::jwt::JwtKeys,
    http,
    infra::crypto::Sealer,
    infra::kv::Kv,
    infra::secret::Secret,
    infra::telemetry,
    jobs::Runtime,
    state::{AppState, Inner},
    store,
};

/// Installs the process-wide TLS provider once (reqwest is built without one).
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Applies the service's migrations and creates the job queue tables.
pub async fn migrate(config: &Config) -> anyhow::Result<Migrated> {
    // A session of its own, never through a transaction-mode pooler: the job queue's setup
    // builds its indexes CONCURRENTLY, which no transaction may hold.
    let db = store::connect_direct(config, 2).await?;
    let applied = migration::Migrator::get_pending_migrations(&db)
        .await?
        .len();
    migration::Migrator::up(&db, None).await?;
    store::queues::job_queue::Queue::from_db(&db)
        .setup()
        .await?;
    db.close().await?;
    let all = migration::Migrator::migrations();
    Ok(Migrated {
        applied,
        known: all.len(),
        latest: all.last().map(|m| m.name().to_string()).unwrap_or_default(),
    })
}

/// What `migrate` did: an operator checking a restored database reads "0 applied".
pub struct Migrated {
    pub applied: usize,
    pub known: usize,
    pub latest: String,
}

impl std::fmt::Display for Migrated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "migrations applied: {} of {}; the schema is current (latest {})",
            self.applied, self.known, self.latest
        )
    }
}

/// Secrets embedded mode generates on first start and keeps in its data dir, so tokens and
/// sealed values survive a restart. Production never reaches this: it refuses to start
/// without configured secrets.
#[derive(Serialize, Deserialize)]
struct EmbeddedSecrets {
    jwt_secret: String,
    secret_key: String,
}

fn embedded_secrets(config: &Config) -> anyhow::Result<EmbeddedSecrets> {
    let path = config.data_dir.join("secrets.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        return Ok(serde_json::from_str(&text)?);
    }
    let random_hex = || {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).expect("the operating system CSPRNG is unavailable");
        crate::infra::crypto::hex(&b)
    };
    let s = EmbeddedSecrets {
        jwt_secret: random_hex(),
        secret_key: random_hex(),
    };
    std::fs::create_dir_all(&config.data_dir)?;
    let text = serde_json::to_string_pretty(&s)?;
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(text.as_bytes())?;
    }
    #[cfg(not(unix))]
    std::fs::write(&path, text)?;
    Ok(s)
}

/// Where the job queue runs: on the service's own pool, or on sessions of its own when
/// `WALLET_DATABASE_DIRECT_URL` is set (apalis listens for new jobs, which a
/// transaction-mode pooler cannot carry). One listener per queue, plus room for fetches.
async fn queue_connection(config: &Config, db: &store::Db) -> anyhow::Result<DatabaseConnection> {
    if config.database_direct_url.is_none() {
        return Ok(db.connection().clone());
    }
    let size = crate::domain::outbox::job_requests::QUEUES.len() as u32 * 2 + 2;
    store::connect_direct(config, size).await
}

pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    install_tls_provider();
    let db = store::connect(&config).await?;
    let kv = match &config.redis_url {
        Some(_) => Kv::redis(
            &config.redis_urls(),
            config.redis_mode,
            config.redis_timeout(),
            &config.redis_prefix,
            config.db_max_connections as usize * 2,
        )?,
        None => Kv::local(),
    };
    if config.redis_url.is_some()
        && let Err(e) = kv.ping().await
    {
        // Not fatal: requests that need Redis answer a retryable 503 until it answers, and
        // health reports it degraded. But an operator should not have to guess where.
        tracing::warn!(
            redis = %describe_redis(&config.redis_urls()),
            "Redis (WALLET_REDIS_URL) is not answering: {e}"
        );
    }
    let (jwt_secret, secret_key) = match (&config.jwt_secret, &config.secret_key) {
        (Some(j), Some(s)) => (j.clone(), s.clone()),
        _ if config.mode() == Mode::Production => {
            anyhow::bail!("production mode needs WALLET_JWT_SECRET and WALLET_SECRET_KEY")
        }
        (j, s) => {
            let generated = embedded_secrets(&config)?;
            (
                j.clone().unwrap_or(Secret::new(generated.jwt_secret)),
                s.clone().unwrap_or(Secret::new(generated.secret_key)),
            )
        }
    };
    let previous: Vec<(String, Vec<u8>)> = config
        .jwt_previous_secrets
        .as_ref()
        .map(|p| {
            p.expose()
                .split(',')
                .filter_map(|item| item.split_once(':'))
                .map(|(k, s)| (k.to_string(), s.as_bytes().to_vec()))
                .collect()
        })
        .unwrap_or_default();
    let jwt = JwtKeys::new(&config.jwt_kid, jwt_secret.expose().as_bytes(), &previous)
        .in_cell(config.cell.clone());
    let sealer = Sealer::new(secret_key.expose().as_bytes());
    let queue = store::queues::job_queue::Queue::from_db(&queue_connection(&config, &db).await?);
    let replica = store::connect_replica(&config).await?.map(|r| {
        Arc::new(store::db::replica::Replica::new(
            r,
            db.clone(),
            kv.clone(),
            Duration::from_millis(config.replica_max_lag_ms),
            Duration::from_millis(config.replica_wait_ms),
        ))
    });
    Ok(AppState::new(Inner {
        config,
        db,
        kv,
        sealer,
        jwt,
        queue,
        replica,
        metrics: telemetry::metrics_handle(),
        capabilities: crate::infra::cache::TtlCache::new(
            crate::domain::platform::CAPABILITIES_TTL,
            10_000,
        ),
        cors: crate::infra::cache::TtlCache::new(crate::domain::platform::cors::CORS_TTL, 1),
        recent_responses: crate::idempotency::recent_responses(),
        key_gate: Default::default(),
        wallet_queue: Default::default(),
    }))
}

/// A running service: its addresses, its state, and handles to stop it.
pub struct Server {
    pub addr: SocketAddr,
    /// Where `/metrics` is served (`WALLET_METRICS_LISTEN_ADDR`), apart from the API.
    pub metrics_addr: SocketAddr,
    pub state: AppState,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    metrics: Listener,
    jobs: Option<Runtime>,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting requests, finishes the ones in flight, stops the job workers, then
    /// closes the database connections.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.server).await;
        if let Some(jobs) = self.jobs {
            jobs.stop().await;
        }
        self.metrics.stop().await;
        store::close(&self.state.db).await;
        self.state.queue.close().await;
    }

    /// Waits until the server ends by itself (it does not, short of an error).
    pub async fn wait(&mut self) -> std::io::Result<()> {
        (&mut self.server).await.unwrap_or(Ok(()))
    }
}

/// A bare HTTP listener with graceful stop, for the metrics port.
pub struct Listener {
    pub addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    sampler: Option<JoinHandle<()>>,
}

impl Listener {
    pub async fn stop(self) {
        if let Some(s) = self.sampler {
            s.abort();
        }
        let _ = self.shutdown.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.server).await;
    }
}

/// A listener serving `ep`, with graceful stop.
fn listening<E: poem::Endpoint + 'static>(
    ep: E,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<Listener> {
    let (addr, shutdown, server) = spawn_server(ep, listener)?;
    Ok(Listener {
        addr,
        shutdown,
        server,
        sampler: None,
    })
}

type Spawned = (
    SocketAddr,
    oneshot::Sender<()>,
    JoinHandle<std::io::Result<()>>,
);

fn spawn_server<E: poem::Endpoint + 'static>(
    app: E,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<Spawned> {
    let local = listener.local_addr()?;
    let acceptor = TcpAcceptor::from_tokio(listener)?;
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        poem::Server::new_with_acceptor(acceptor)
            .run_with_graceful_shutdown(
                app,
                async {
                    let _ = rx.await;
                },
                Some(Duration::from_secs(10)),
            )
            .await
    });
    Ok((local, tx, server))
}

/// Binds `addr`, the value of the setting `var`; a failure names the setting to change, so
/// whoever started a second process on the host knows what to do.
async fn bind(addr: &str, var: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            "another process holds it (another wallet-api or wallet-worker on this host?)"
        } else {
            "it cannot be bound here"
        };
        anyhow::anyhow!(
            "cannot listen on {addr} ({var}): {e}: {why}. Set {var} to a free address \
             (port 0 picks one and the address is logged)"
        )
    })
}

/// Serves `state` on `addr` (port 0 picks a free port) and its metrics on
/// `WALLET_METRICS_LISTEN_ADDR`; runs the job workers in this process when `run_workers`.
pub async fn serve(state: AppState, addr: &str, run_workers: bool) -> anyhow::Result<Server> {
    let listener = bind(addr, "WALLET_LISTEN_ADDR").await?;
    let metrics = serve_metrics(&state, ServiceProcess::Api).await?;
    let (local, tx, server) = spawn_server(http::routes(state.clone()), listener)?;
    let jobs = if run_workers {
        Some(Runtime::start(state.clone())?)
    } else {
        None
    };
    Ok(Server {
        addr: local,
        metrics_addr: metrics.addr,
        state,
        shutdown: tx,
        server,
        metrics,
        jobs,
    })
}

/// The metrics listener of either process (`http::metrics_routes`), and the sampler of the
/// gauges every process has (its database pool, its subsystems), which lives as long as it.
///
/// `WALLET_METRICS_LISTEN_ADDR` when set, and a refusal naming it when that address cannot
/// be bound. Unset, the process's own default; when another process already holds that
/// (a second server on a developer's machine), a free port instead, logged, rather than a
/// process that will not start for the sake of its metrics.
pub async fn serve_metrics(state: &AppState, process: ServiceProcess) -> anyhow::Result<Listener> {
    const VAR: &str = "WALLET_METRICS_LISTEN_ADDR";
    let listener = match &state.config.metrics_listen_addr {
        Some(addr) => bind(addr, VAR).await?,
        None => {
            let default = process.default_metrics_addr();
            match tokio::net::TcpListener::bind(default).await {
                Ok(l) => l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    let l = bind("127.0.0.1:0", VAR).await?;
                    tracing::warn!(
                        metrics = %l.local_addr()?,
                        default,
                        "the default metrics address is in use (another process on this host); serving metrics on a free port instead: set {VAR} to choose one"
                    );
                    l
                }
                Err(_) => bind(default, VAR).await?,
            }
        }
    };
    let listener = listening(http::metrics_routes(state.clone()), listener)?;
    let sampler = tokio::spawn(state.clone().sample_process_gauges());
    Ok(Listener {
        sampler: Some(sampler),
        ..listener
    })
}

/// `wallet-api serve`.
pub async fn serve_from_config(config: Config) -> anyhow::Result<()> {
    telemetry::init_service(config.json_logs(), "wallet-api");
    let started = std::time::Instant::now();
    let mode = config.mode();
    if mode == Mode::Embedded {
        migrate(&config).await?;
    }
    let listen = config.listen_addr.clone();
    let run_workers = config.runs_workers_in_process();
    let db_url = config.effective_database_url();
    let state = build_state(config).await?;
    let mut server = serve(state, &listen, run_workers).await?;
    let ready_ms = started.elapsed().as_millis();
    match mode {
        Mode::Embedded => {
            let file = store::db::sqlite_file(&db_url).unwrap_or_default();
            eprintln!(
                "wallet-api listening on {url}/v1 (embedded mode: SQLite at {file}, jobs in-process; ready in {ready_ms} ms)\n\
                 docs: {url}/v1/docs    metrics: http://{metrics}/metrics\n\
                 create a tenant:  cargo run -p api -- tenant create --name \"Demo\" --sandbox --json\n\
                 then:             curl -H \"x-api-key: <platform_key>\" {url}/v1/capabilities",
                url = server.url(),
                metrics = server.metrics_addr,
            );
        }
        Mode::Production => {
            tracing::info!(addr = %server.addr, metrics = %server.metrics_addr, ready_ms = ready_ms as u64, workers_in_process = run_workers, "wallet-api listening (production mode)");
        }
    }
    tokio::select! {
        r = server.wait() => { r?; }
        _ = shutdown_signal() => {
            tracing::info!("shutting down");
            server.stop().await;
        }
    }
    telemetry::shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Where the Redis URLs point (host, port, database each), never a password.
fn describe_redis(urls: &[&str]) -> String {
    urls.iter()
        .map(|one| match reqwest::Url::parse(one) {
            Ok(u) => format!(
                "{}:{}{}",
                u.host_str().unwrap_or("(no host)"),
                u.port().unwrap_or(6379),
                u.path()
            ),
            Err(_) => "(an unparseable URL)".to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}
