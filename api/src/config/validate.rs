//! The rules a configuration must meet before anything starts: each refusal names the
//! `WALLET_*` variable to change (`Config::load` runs them).
use std::net::SocketAddr;

use super::{Config, ConfigError, Mode, Pooler, RedisMode, invalid};

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.database_url {
            let ok = ["postgres://", "postgresql://", "sqlite:"]
                .iter()
                .any(|p| url.starts_with(p));
            if !ok {
                return Err(invalid(
                    "WALLET_DATABASE_URL",
                    "must start with postgres:// or sqlite:",
                ));
            }
        }
        if let Some(url) = &self.database_direct_url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(invalid(
                "WALLET_DATABASE_DIRECT_URL",
                "must start with postgres:// (it is the direct URL of the PostgreSQL database)",
            ));
        }
        if let Some(url) = &self.database_replica_url {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(invalid(
                    "WALLET_DATABASE_REPLICA_URL",
                    "must start with postgres:// (a streaming replica of the PostgreSQL database)",
                ));
            }
            if self.mode() != Mode::Production {
                return Err(invalid(
                    "WALLET_DATABASE_REPLICA_URL",
                    "only applies with a postgres:// WALLET_DATABASE_URL",
                ));
            }
        }
        if !(10..=600_000).contains(&self.replica_max_lag_ms) {
            return Err(invalid("WALLET_REPLICA_MAX_LAG_MS", "must be 10..=600000"));
        }
        if self.replica_wait_ms > 10_000 {
            return Err(invalid("WALLET_REPLICA_WAIT_MS", "must be at most 10000"));
        }
        if self.database_pooler == Pooler::Transaction {
            if self.mode() != Mode::Production {
                return Err(invalid(
                    "WALLET_DATABASE_POOLER",
                    "transaction needs a postgres:// WALLET_DATABASE_URL (the pooler's address)",
                ));
            }
            if self.database_direct_url.is_none() {
                return Err(invalid(
                    "WALLET_DATABASE_DIRECT_URL",
                    "required with WALLET_DATABASE_POOLER=transaction: migrations and the job queue's listeners need a session of their own",
                ));
            }
        } else if self.database_direct_url.is_some() && self.mode() != Mode::Production {
            return Err(invalid(
                "WALLET_DATABASE_DIRECT_URL",
                "only applies with a postgres:// WALLET_DATABASE_URL",
            ));
        }
        if let Some(url) = &self.redis_url {
            let urls = self.redis_urls();
            if urls.len() > 1 && self.redis_mode == RedisMode::Standalone {
                return Err(invalid(
                    "WALLET_REDIS_URL",
                    "lists several servers: that needs WALLET_REDIS_MODE=cluster",
                ));
            }
            if urls.is_empty()
                || !urls
                    .iter()
                    .all(|u| u.starts_with("redis://") || u.starts_with("rediss://"))
            {
                return Err(invalid(
                    "WALLET_REDIS_URL",
                    if url.contains(',') {
                        "each seed node must start with redis:// or rediss://"
                    } else {
                        "must start with redis:// or rediss://"
                    },
                ));
            }
        } else if self.redis_mode == RedisMode::Cluster {
            return Err(invalid(
                "WALLET_REDIS_MODE",
                "cluster needs WALLET_REDIS_URL (its seed nodes, comma-separated)",
            ));
        }
        // A brace in the namespace would be taken for a hash tag and put every key in one
        // slot of a cluster (and split the keys one script needs).
        if self.redis_prefix.contains(['{', '}']) {
            return Err(invalid(
                "WALLET_REDIS_PREFIX",
                "must not contain { or } (Redis Cluster reads them as a hash tag)",
            ));
        }
        if let Some(cell) = &self.cell
            && !is_cell_name(cell)
        {
            return Err(invalid(
                "WALLET_CELL",
                "1 to 8 lowercase letters or digits (it goes into every key minted here)",
            ));
        }
        self.listen_addr
            .parse::<SocketAddr>()
            .map_err(|e| invalid("WALLET_LISTEN_ADDR", e.to_string()))?;
        if let Some(addr) = &self.metrics_listen_addr {
            addr.parse::<SocketAddr>()
                .map_err(|e| invalid("WALLET_METRICS_LISTEN_ADDR", e.to_string()))?;
        }
        if self.mode() == Mode::Production {
            if self.redis_url.is_none() {
                return Err(invalid(
                    "WALLET_REDIS_URL",
                    "required with a PostgreSQL database: locks, rate limits and the key cache must be shared by every replica",
                ));
            }
            if self.jwt_secret.is_none() {
                return Err(invalid(
                    "WALLET_JWT_SECRET",
                    "required in production mode; the service never invents one",
                ));
            }
            if self.secret_key.is_none() {
                return Err(invalid(
                    "WALLET_SECRET_KEY",
                    "required in production mode; the service never invents one",
                ));
            }
        }
        for (name, s) in [
            ("WALLET_JWT_SECRET", &self.jwt_secret),
            ("WALLET_SECRET_KEY", &self.secret_key),
        ] {
            if let Some(s) = s
                && s.expose().len() < 32
            {
                return Err(invalid(name, "must be at least 32 bytes"));
            }
        }
        if let Some(prev) = &self.jwt_previous_secrets {
            for item in prev.expose().split(',').filter(|s| !s.is_empty()) {
                match item.split_once(':') {
                    Some((kid, secret)) if !kid.is_empty() && secret.len() >= 32 => {}
                    _ => {
                        return Err(invalid(
                            "WALLET_JWT_PREVIOUS_SECRETS",
                            "expected kid:secret pairs separated by commas, secrets of at least 32 bytes",
                        ));
                    }
                }
            }
        }
        if self.jwt_kid.is_empty() || self.jwt_kid.len() > 32 {
            return Err(invalid("WALLET_JWT_KID", "must be 1 to 32 characters"));
        }
        if let Some(f) = &self.log_format
            && f != "json"
            && f != "pretty"
        {
            return Err(invalid("WALLET_LOG_FORMAT", "must be json or pretty"));
        }
        if !(1..=720).contains(&self.idempotency_ttl_hours) {
            return Err(invalid(
                "WALLET_IDEMPOTENCY_TTL_HOURS",
                "must be between 1 and 720",
            ));
        }
        if !(1..=90 * 24 * 3600).contains(&self.enrollment_window_secs) {
            return Err(invalid(
                "WALLET_ENROLLMENT_WINDOW_SECS",
                "must be between 1 and 7776000 (90 days)",
            ));
        }
        if !(10..=86_400).contains(&self.retention_interval_secs) {
            return Err(invalid(
                "WALLET_RETENTION_INTERVAL_SECS",
                "must be between 10 and 86400",
            ));
        }
        if !(10..=100_000).contains(&self.retention_batch_rows) {
            return Err(invalid(
                "WALLET_RETENTION_BATCH_ROWS",
                "must be between 10 and 100000",
            ));
        }
        for (setting, days) in [
            ("WALLET_RETENTION_JOBS_DAYS", self.retention_jobs_days),
            ("WALLET_RETENTION_WEBHOOK_DAYS", self.retention_webhook_days),
            (
                "WALLET_RETENTION_SANDBOX_MESSAGES_DAYS",
                self.retention_sandbox_messages_days,
            ),
            ("WALLET_REPORT_RETENTION_DAYS", self.report_retention_days),
        ] {
            if !(1..=3650).contains(&days) {
                return Err(invalid(setting, "must be between 1 and 3650"));
            }
        }
        if !(10..=86_400).contains(&self.report_timeout_secs) {
            return Err(invalid(
                "WALLET_REPORT_TIMEOUT_SECS",
                "must be between 10 and 86400",
            ));
        }
        if !(1..=86_400).contains(&self.snapshot_interval_secs) {
            return Err(invalid(
                "WALLET_SNAPSHOT_INTERVAL_SECS",
                "must be between 1 and 86400",
            ));
        }
        if !(1..=3600).contains(&self.sweep_interval_secs) {
            return Err(invalid(
                "WALLET_SWEEP_INTERVAL_SECS",
                "must be between 1 and 3600",
            ));
        }
        if !(1..=24 * 3600).contains(&self.checkout_session_ttl_secs) {
            return Err(invalid(
                "WALLET_CHECKOUT_SESSION_TTL_SECS",
                "must be between 1 and 86400",
            ));
        }
        if let Some(base) = &self.enrollment_link_base
            && !(base.starts_with("https://") || base.starts_with("http://"))
        {
            return Err(invalid(
                "WALLET_ENROLLMENT_LINK_BASE",
                "must be an http(s) URL",
            ));
        }
        if !(1_000..=120_000).contains(&self.request_timeout_ms)
            || self.request_timeout_ms <= self.idempotency_wait_ms
        {
            return Err(invalid(
                "WALLET_REQUEST_TIMEOUT_MS",
                "must be between 1000 and 120000, and above WALLET_IDEMPOTENCY_WAIT_MS",
            ));
        }
        if self.max_inflight_requests > 100_000 || self.max_queued_requests > 100_000 {
            return Err(invalid(
                "WALLET_MAX_INFLIGHT_REQUESTS",
                "WALLET_MAX_INFLIGHT_REQUESTS and WALLET_MAX_QUEUED_REQUESTS must be at most 100000",
            ));
        }
        if !(100..=600_000).contains(&self.db_statement_timeout_ms) {
            return Err(invalid(
                "WALLET_DB_STATEMENT_TIMEOUT_MS",
                "must be between 100 and 600000",
            ));
        }
        if self.idempotency_wait_ms > 60_000 {
            return Err(invalid(
                "WALLET_IDEMPOTENCY_WAIT_MS",
                "must be at most 60000",
            ));
        }
        if self.rate_limit == 0 || self.rate_limit_sandbox < self.rate_limit {
            return Err(invalid(
                "WALLET_RATE_LIMIT_SANDBOX",
                "must be at least WALLET_RATE_LIMIT, which must be positive",
            ));
        }
        for (var, n) in [
            (
                "WALLET_OPS_SIGN_IN_FAILURES_PER_CLIENT",
                self.ops_sign_in_failures_per_client,
            ),
            (
                "WALLET_OPS_SIGN_IN_FAILURES_PER_PREFIX",
                self.ops_sign_in_failures_per_prefix,
            ),
        ] {
            if n == 0 {
                return Err(invalid(var, "must be positive"));
            }
        }
        if self.risk_terminal_failures == 0
            || self.risk_branch_failures < self.risk_terminal_failures
            || self.risk_merchant_failures < self.risk_branch_failures
        {
            return Err(invalid(
                "WALLET_RISK_MERCHANT_FAILURES",
                "terminal, branch and merchant failure thresholds must be positive and not decrease (terminal <= branch <= merchant)",
            ));
        }
        if !(60..=86_400).contains(&self.risk_failure_window_secs) {
            return Err(invalid(
                "WALLET_RISK_FAILURE_WINDOW_SECS",
                "must be between 60 and 86400",
            ));
        }
        if !(1..=86_400).contains(&self.ops_sign_in_window_secs) {
            return Err(invalid(
                "WALLET_OPS_SIGN_IN_WINDOW_SECS",
                "must be between 1 and 86400",
            ));
        }
        if !(1..=3600).contains(&self.rate_limit_window_secs) {
            return Err(invalid(
                "WALLET_RATE_LIMIT_WINDOW_SECS",
                "must be between 1 and 3600",
            ));
        }
        if !(10..=14).contains(&self.bcrypt_cost) {
            return Err(invalid("WALLET_BCRYPT_COST", "must be between 10 and 14"));
        }
        if self.max_body_bytes < 1024 || self.max_body_bytes > 16 * 1024 * 1024 {
            return Err(invalid(
                "WALLET_MAX_BODY_BYTES",
                "must be between 1 KiB and 16 MiB",
            ));
        }
        if self.job_max_attempts == 0 || self.job_max_attempts > 50 {
            return Err(invalid(
                "WALLET_JOB_MAX_ATTEMPTS",
                "must be between 1 and 50",
            ));
        }
        if self.job_backoff_base_ms == 0 || self.job_backoff_max_ms < self.job_backoff_base_ms {
            return Err(invalid(
                "WALLET_JOB_BACKOFF_MAX_MS",
                "must be at least WALLET_JOB_BACKOFF_BASE_MS, which must be positive",
            ));
        }
        if self.job_concurrency == 0 {
            return Err(invalid("WALLET_JOB_CONCURRENCY", "must be positive"));
        }
        if !(1..=600).contains(&self.job_heartbeat_secs) {
            return Err(invalid(
                "WALLET_JOB_HEARTBEAT_SECS",
                "must be between 1 and 600",
            ));
        }
        if self.webhook_max_attempts == 0 || self.webhook_max_attempts > 30 {
            return Err(invalid(
                "WALLET_WEBHOOK_MAX_ATTEMPTS",
                "must be between 1 and 30",
            ));
        }
        if self.webhook_backoff_base_ms == 0
            || self.webhook_backoff_max_ms < self.webhook_backoff_base_ms
        {
            return Err(invalid(
                "WALLET_WEBHOOK_BACKOFF_MAX_MS",
                "must be at least WALLET_WEBHOOK_BACKOFF_BASE_MS, which must be positive",
            ));
        }
        if self.webhook_timeout_ms == 0 || self.webhook_timeout_ms >= self.job_timeout_ms {
            return Err(invalid(
                "WALLET_WEBHOOK_TIMEOUT_MS",
                "must be positive and below WALLET_JOB_TIMEOUT_MS",
            ));
        }
        if self.webhook_concurrency == 0 || self.webhook_concurrency > 1024 {
            return Err(invalid(
                "WALLET_WEBHOOK_CONCURRENCY",
                "must be between 1 and 1024",
            ));
        }
        if self.webhook_disable_after_failures == 0 {
            return Err(invalid(
                "WALLET_WEBHOOK_DISABLE_AFTER_FAILURES",
                "must be positive",
            ));
        }
        if self.db_max_connections < 2 {
            return Err(invalid("WALLET_DB_MAX_CONNECTIONS", "must be at least 2"));
        }
        if let Some(url) = &self.sms_provider_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(invalid("WALLET_SMS_PROVIDER_URL", "must be an http(s) URL"));
        }
        Ok(())
    }
}

/// 1 to 8 lowercase ASCII letters or digits: what may go into a key's segment.
fn is_cell_name(s: &str) -> bool {
    (1..=8).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}
