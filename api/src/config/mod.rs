//! One `Config`, loaded at start-up from embedded defaults, then an optional TOML file
//! (`WALLET_CONFIG_FILE`), then `WALLET_*` environment variables, and validated before
//! anything else runs. A bad setting stops the process with a message naming it.
mod validate;

use std::{path::PathBuf, time::Duration};

use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};
use serde::{Deserialize, Serialize};

use crate::infra::secret::Secret;

/// Which deployment shape this process runs in. Decided by the database URL alone, so a
/// single code path serves both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// SQLite file, in-process locks and rate limits, jobs run inside the API process.
    Embedded,
    /// PostgreSQL + Redis; API and worker are separate, horizontally scaled processes.
    Production,
}

/// Which of the service's binaries is running: each has a metrics port of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceProcess {
    /// `wallet-api serve` (in embedded mode it runs the jobs too).
    Api,
    /// `wallet-worker run`.
    Worker,
}

impl ServiceProcess {
    /// The metrics listener when `WALLET_METRICS_LISTEN_ADDR` is unset.
    pub fn default_metrics_addr(self) -> &'static str {
        match self {
            ServiceProcess::Api => "127.0.0.1:9091",
            ServiceProcess::Worker => "127.0.0.1:9092",
        }
    }
}

/// A connection pooler between the service and PostgreSQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooler {
    /// Every pooled connection is a PostgreSQL session of the service's own.
    #[default]
    None,
    /// A transaction-mode pooler: consecutive transactions of one client connection may run
    /// on different server sessions, so nothing may outlive a transaction (`store::db::pooler`).
    Transaction,
}

/// How the Redis at `redis_url` is deployed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    /// One server (with or without replicas behind a failover address).
    #[default]
    Standalone,
    /// Redis Cluster: `redis_url` lists one or more seed nodes, comma-separated; the
    /// service learns the rest of the cluster from them and follows slot moves and
    /// failovers.
    Cluster,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `postgres://…` or `sqlite://…`. Unset: `sqlite://<data_dir>/wallet.db`.
    pub database_url: Option<String>,
    /// What stands between the service and PostgreSQL at `database_url`: `none` (a direct
    /// connection, the default) or `transaction` (a transaction-mode pooler such as
    /// PgBouncer, which hands a server connection to a client for one transaction only).
    pub database_pooler: Pooler,
    /// A direct (session) PostgreSQL URL for what a transaction-mode pooler cannot carry:
    /// migrations (`CREATE INDEX CONCURRENTLY`) and the job queue (apalis' `LISTEN` and its
    /// fetches). Required with `database_pooler = transaction`; unset, they use
    /// `database_url`.
    pub database_direct_url: Option<String>,
    /// A streaming replica of the database (`postgres://…`, reached the way
    /// `database_pooler` says). Reads that tolerate lag go there: the transaction and event
    /// feeds and the operations console (`store::db::replica`); every read a money decision,
    /// an idempotent replay or authentication rests on stays on the primary.
    pub database_replica_url: Option<String>,
    /// A replica further behind than this (or down, or promoted) serves nothing until it
    /// catches up; requests go to the primary.
    pub replica_max_lag_ms: u64,
    /// How long a lag-tolerant request waits for the replica to replay what the primary had
    /// committed when the request began, before the primary serves it instead.
    pub replica_wait_ms: u64,
    /// `redis://…`. Unset: in-process locks, rate limits and caches (single process only).
    /// With `redis_mode = cluster`, one or more seed nodes, comma-separated.
    pub redis_url: Option<String>,
    /// `standalone` (the default) or `cluster` (Redis Cluster).
    pub redis_mode: RedisMode,
    pub listen_addr: String,
    /// Where this process serves `/metrics` (and the worker its `/health`), apart from the
    /// public API listener. Unset: each binary has its own default
    /// (`ServiceProcess::default_metrics_addr`), so an API and a worker on one host do not
    /// contend for one port, and a second process of the same binary falls back to a free
    /// port, logged.
    pub metrics_listen_addr: Option<String>,
    /// Where embedded mode keeps its SQLite files and generated secrets.
    pub data_dir: PathBuf,
    /// HS256 secret that signs terminal JWTs (at least 32 bytes). Required in production.
    pub jwt_secret: Option<Secret>,
    /// Key id stamped in the JWT header so secrets can rotate.
    pub jwt_kid: String,
    /// Earlier secrets as `kid:secret,kid:secret`: tokens they signed stay valid until expiry.
    pub jwt_previous_secrets: Option<Secret>,
    /// Key that seals secrets kept for idempotent replays (at least 32 bytes). Required in production.
    pub secret_key: Option<Secret>,
    /// `json` (default in production) or `pretty` (default in embedded mode).
    pub log_format: Option<String>,
    /// Run the job workers inside the API process. Default: true in embedded mode only.
    pub run_workers: Option<bool>,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// How long a stored response can be replayed for its Idempotency-Key.
    pub idempotency_ttl_hours: u32,
    /// How long a retry waits for the first request with its key to finish before 409.
    pub idempotency_wait_ms: u64,
    /// Payment OTPs one customer wallet may receive per 5 minutes, across orders (the spec's
    /// 3 per order applies as well).
    pub otp_sends_per_wallet: u64,
    /// How long a customer has to prove their phone after enrollment starts (or after a
    /// credit for an unknown phone opened a proto-wallet) before the window lapses.
    pub enrollment_window_secs: u64,
    /// How often the worker looks for lapsed enrollments and timed-out checkout sessions.
    pub sweep_interval_secs: u64,
    /// Page the enrollment SMS links to (`?token=` is appended); unset: the SMS carries
    /// the code only.
    pub enrollment_link_base: Option<String>,
    /// How long a checkout session stays open without a payment.
    pub checkout_session_ttl_secs: u64,
    /// Requests per window per integration on rate-limited operations (identify, token
    /// validate); sandbox keys get `rate_limit_sandbox`.
    pub rate_limit: u32,
    pub rate_limit_sandbox: u32,
    pub rate_limit_window_secs: u64,
    /// How long a verified API key is trusted from the cache before bcrypt runs again.
    pub key_cache_ttl_secs: u64,
    /// bcrypt cost for newly minted keys (10..=14).
    pub bcrypt_cost: u32,
    /// Upper bound on any single Redis call; past it the request fails with a retryable error.
    pub redis_timeout_ms: u64,
    /// Upper bound on acquiring a database connection.
    pub db_acquire_timeout_ms: u64,
    pub db_max_connections: u32,
    /// PostgreSQL `lock_timeout`: the longest a request waits for a row lock before a
    /// retryable 503 (SQLite's writers wait up to its busy timeout instead).
    pub db_lock_timeout_ms: u64,
    /// PostgreSQL `statement_timeout`: the server cancels any one statement running longer.
    pub db_statement_timeout_ms: u64,
    /// The bound on a whole request, whatever it waits on (a database or Redis that stopped
    /// answering without refusing): past it the caller gets a retryable 503 and the work is
    /// abandoned (its transaction never commits; an Idempotency-Key retry settles it).
    pub request_timeout_ms: u64,
    /// Requests of `/v1` that run at once in one API process (0: twice
    /// `db_max_connections`); `max_queued_requests` more wait; past both, a fast 503.
    pub max_inflight_requests: usize,
    /// 0: enough for 64 requests in all, at least a quarter of `max_inflight_requests`.
    pub max_queued_requests: usize,
    /// Namespace for every Redis key, so several deployments (or test runs) can share a server.
    pub redis_prefix: String,
    /// This deployment's cell when tenants are split across several (docs/scaling.md,
    /// section 6): 1 to 8 lowercase letters or digits. Keys and tokens minted here name it,
    /// and ones naming another cell are refused. Unset: the home cell, whose keys name none.
    pub cell: Option<String>,
    /// Attempts a job gets before it is dead-lettered.
    pub job_max_attempts: u32,
    /// First retry wait; each further retry doubles it (with full jitter) up to `job_backoff_max_ms`.
    pub job_backoff_base_ms: u64,
    pub job_backoff_max_ms: u64,
    /// How long a single job run may take before it counts as a failed attempt.
    pub job_timeout_ms: u64,
    pub job_concurrency: usize,
    /// How often a worker says it is alive. A worker silent for three of these (killed,
    /// partitioned) is dead: the jobs it held are picked up again by the others.
    pub job_heartbeat_secs: u64,
    /// How often the outbox relay looks for committed rows.
    pub outbox_poll_ms: u64,
    /// Attempts a webhook delivery gets before it is dead-lettered (default 14: with the
    /// default backoff, retries span roughly 16 to 33 hours).
    pub webhook_max_attempts: u32,
    /// Wait before the 2nd attempt; each further wait doubles (equal jitter) up to the max.
    pub webhook_backoff_base_ms: u64,
    pub webhook_backoff_max_ms: u64,
    /// How long the service waits for an endpoint's answer.
    pub webhook_timeout_ms: u64,
    /// Deliveries in flight per worker process (they mostly wait on the network).
    pub webhook_concurrency: usize,
    /// An endpoint is disabled when this many attempts in a row failed ...
    pub webhook_disable_after_failures: u32,
    /// ... over at least this long.
    pub webhook_disable_after_secs: u64,
    /// Allow endpoints on private, loopback and link-local addresses (tests, local setups).
    pub webhook_allow_private_targets: bool,
    /// How long a rotated-out secret keeps signing beside the new one, by default.
    pub webhook_secret_grace_secs: u64,
    /// HTTP SMS provider used for non-sandbox keys.
    pub sms_provider_url: Option<String>,
    pub sms_provider_token: Option<Secret>,
    pub sms_provider_timeout_ms: u64,
    /// How long an operations console session lasts after login.
    pub ops_session_secs: u64,
    /// Failed operator sign-ins (console or `x-operator-key`) one client address may make
    /// per `ops_sign_in_window_secs` before it is refused with 429 until the window ends.
    pub ops_sign_in_failures_per_client: u64,
    /// Failed sign-ins with one operator key prefix, from any address, per window (a key
    /// that signed in within the last day is exempt from its prefix's lock).
    pub ops_sign_in_failures_per_prefix: u64,
    /// The window failed operator sign-ins are counted in.
    pub ops_sign_in_window_secs: u64,
    /// Failed credentials (short codes, QR payloads, OTPs, balance-check lookups) one
    /// terminal may make in the trailing `risk_failure_window_secs` before its credential
    /// entry is refused (`domain::risk::failures`).
    pub risk_terminal_failures: u64,
    /// The same for every terminal of one branch together.
    pub risk_branch_failures: u64,
    /// The same for every terminal of one merchant together: a merchant-wide block.
    pub risk_merchant_failures: u64,
    /// The trailing window failed credentials are counted in.
    pub risk_failure_window_secs: u64,
    /// How often the retention jobs run (finished jobs, relayed outbox events past the
    /// events API's 30 days, expired idempotency records, OTP sessions and QR nonces,
    /// webhook deliveries and attempts, sandbox messages).
    pub retention_interval_secs: u64,
    /// Rows one retention statement deletes; batches follow each other with a pause, so no
    /// single statement holds locks or the SQLite writer for long.
    pub retention_batch_rows: u64,
    /// Days a finished job (done, or failed for good) stays in the job queue tables.
    pub retention_jobs_days: u32,
    /// Days a settled webhook delivery (delivered or dead) and its attempts stay.
    pub retention_webhook_days: u32,
    /// Days a captured sandbox SMS stays readable.
    pub retention_sandbox_messages_days: u32,
    /// Days a report run and its file stay downloadable after they were asked for.
    pub report_retention_days: u32,
    /// How long one attempt at running a report may take, in seconds.
    pub report_timeout_secs: u64,
    /// How often each worker builds the ledger's sealed hours into snapshots.
    pub snapshot_interval_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: None,
            database_pooler: Pooler::None,
            database_direct_url: None,
            database_replica_url: None,
            replica_max_lag_ms: 5_000,
            replica_wait_ms: 100,
            redis_url: None,
            redis_mode: RedisMode::Standalone,
            listen_addr: "127.0.0.1:8080".into(),
            metrics_listen_addr: None,
            data_dir: PathBuf::from("wallet-data"),
            jwt_secret: None,
            jwt_kid: "k1".into(),
            jwt_previous_secrets: None,
            secret_key: None,
            log_format: None,
            run_workers: None,
            max_body_bytes: 256 * 1024,
            idempotency_ttl_hours: 24,
            idempotency_wait_ms: 5_000,
            otp_sends_per_wallet: 10,
            enrollment_window_secs: 7 * 24 * 3600,
            sweep_interval_secs: 30,
            enrollment_link_base: None,
            checkout_session_ttl_secs: 30 * 60,
            rate_limit: 600,
            rate_limit_sandbox: 1200,
            rate_limit_window_secs: 60,
            key_cache_ttl_secs: 60,
            bcrypt_cost: 12,
            redis_timeout_ms: 500,
            db_acquire_timeout_ms: 3000,
            db_max_connections: 20,
            db_lock_timeout_ms: 2_000,
            db_statement_timeout_ms: 5_000,
            request_timeout_ms: 10_000,
            max_inflight_requests: 0,
            max_queued_requests: 0,
            redis_prefix: "wallet:".into(),
            cell: None,
            job_max_attempts: 8,
            job_backoff_base_ms: 2_000,
            job_backoff_max_ms: 15 * 60 * 1000,
            job_timeout_ms: 30_000,
            job_concurrency: 8,
            job_heartbeat_secs: 20,
            outbox_poll_ms: 100,
            webhook_max_attempts: 14,
            webhook_backoff_base_ms: 60_000,
            webhook_backoff_max_ms: 6 * 3600 * 1000,
            webhook_timeout_ms: 10_000,
            webhook_concurrency: 64,
            webhook_disable_after_failures: 200,
            webhook_disable_after_secs: 24 * 3600,
            webhook_allow_private_targets: false,
            webhook_secret_grace_secs: 24 * 3600,
            sms_provider_url: None,
            sms_provider_token: None,
            sms_provider_timeout_ms: 5_000,
            ops_session_secs: 30 * 60,
            ops_sign_in_failures_per_client: 10,
            ops_sign_in_failures_per_prefix: 5,
            ops_sign_in_window_secs: 15 * 60,
            risk_terminal_failures: 10,
            risk_branch_failures: 50,
            risk_merchant_failures: 250,
            risk_failure_window_secs: 15 * 60,
            retention_interval_secs: 300,
            retention_batch_rows: 1_000,
            retention_jobs_days: 7,
            retention_webhook_days: 30,
            retention_sandbox_messages_days: 30,
            report_retention_days: 30,
            report_timeout_secs: 600,
            snapshot_interval_secs: 60,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration could not be read: {0}")]
    Load(String),
    #[error("invalid setting {setting}: {reason}")]
    Invalid {
        setting: &'static str,
        reason: String,
    },
}

fn invalid(setting: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting,
        reason: reason.into(),
    }
}

impl Config {
    /// Defaults, then `WALLET_CONFIG_FILE` (TOML) if set, then `WALLET_*` variables.
    pub fn load() -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Ok(path) = std::env::var("WALLET_CONFIG_FILE") {
            if !std::path::Path::new(&path).is_file() {
                return Err(invalid(
                    "WALLET_CONFIG_FILE",
                    format!("{path} is not a file"),
                ));
            }
            fig = fig.merge(Toml::file(path));
        }
        // Unknown WALLET_* variables are an error (a typo must not silently fall back to a
        // default), except WALLET_TEST_*, which belongs to the test harness.
        fig = fig.merge(Env::prefixed("WALLET_").filter(|k| {
            let k = k.as_str().to_ascii_lowercase();
            k != "config_file" && !k.starts_with("test_")
        }));
        let cfg: Config = fig.extract().map_err(|e| {
            // figment names the key; make it the env var a reader would set.
            let key = e
                .path
                .first()
                .map(|k| format!("WALLET_{}", k.to_uppercase()))
                .unwrap_or_default();
            ConfigError::Load(format!("{key}: {}", e.kind).trim().to_string())
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn mode(&self) -> Mode {
        match &self.database_url {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Mode::Production
            }
            _ => Mode::Embedded,
        }
    }

    /// The database URL to connect to; embedded mode defaults to a file in the data dir.
    pub fn effective_database_url(&self) -> String {
        self.database_url.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("wallet.db").display()
            )
        })
    }

    /// The URL of a session of the service's own: `database_direct_url` when set.
    pub fn direct_database_url(&self) -> String {
        self.database_direct_url
            .clone()
            .unwrap_or_else(|| self.effective_database_url())
    }

    pub fn runs_workers_in_process(&self) -> bool {
        self.run_workers.unwrap_or(self.mode() == Mode::Embedded)
    }

    pub fn json_logs(&self) -> bool {
        match self.log_format.as_deref() {
            Some(f) => f == "json",
            None => self.mode() == Mode::Production,
        }
    }

    /// Requests that run at once, and that wait, before the API sheds load.
    pub fn admission(&self) -> (usize, usize) {
        let inflight = match self.max_inflight_requests {
            0 => 2 * self.db_max_connections as usize,
            n => n,
        };
        // Room for 64 concurrent callers in all (what a replica's capacity is measured at),
        // at least a quarter of the running ones. Every request waiting lengthens the wait
        // of every admitted one: under twice the capacity, 40 waiting behind 40 running
        // gave admitted payments a p99 of 125 ms against 70 ms at capacity (bench/load).
        let queued = match self.max_queued_requests {
            0 => 64usize.saturating_sub(inflight).max(inflight / 4),
            n => n,
        };
        (inflight, queued)
    }

    /// The Redis server (standalone) or seed nodes (cluster) `redis_url` names.
    pub fn redis_urls(&self) -> Vec<&str> {
        self.redis_url
            .as_deref()
            .map(|u| {
                u.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }
}
