//! Everything a request or job needs, built once at start-up and shared.
use std::{ops::Deref, sync::Arc, time::Duration};

use crate::store::Db;
use metrics_exporter_prometheus::PrometheusHandle;

use serde_json::value::RawValue;

use crate::{
    config::{Config, Mode},
    domain::credentials::{
        authenticate::{KeyAuth, VerifyGate},
        jwt::JwtKeys,
    },
    domain::platform::CapabilitiesKey,
    error::{ApiError, Subsystem},
    infra::cache::TtlCache,
    infra::crypto::Sealer,
    infra::kv::Kv,
    infra::telemetry::metrics as m,
    store,
};

#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub config: Config,
    pub db: Db,
    pub kv: Kv,
    pub sealer: Sealer,
    pub jwt: JwtKeys,
    pub queue: store::queues::job_queue::Queue,
    /// The read replica, if one is configured (`lagging`).
    pub replica: Option<Arc<store::db::replica::Replica>>,
    pub metrics: PrometheusHandle,
    /// Rendered `GET /capabilities` answers (see `domain::platform::CAPABILITIES_TTL`).
    pub capabilities: TtlCache<CapabilitiesKey, Arc<RawValue>>,
    /// Every integration's browser origins (see `domain::platform::cors`), reloaded after `CORS_TTL`.
    pub cors: TtlCache<(), Arc<crate::domain::platform::cors::CorsOrigins>>,
    /// Embedded mode's copies of recent idempotent responses.
    pub recent_responses: crate::idempotency::RecentResponses,
    /// One key verification (bcrypt) per key at a time on this replica.
    pub key_gate: VerifyGate,
    /// Payments of one wallet take turns on this replica (see `wallet_queue`).
    pub wallet_queue: Arc<crate::infra::wallet_queue::WalletQueue>,
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(inner: Inner) -> Self {
        AppState(Arc::new(inner))
    }

    /// The longest a request waits its turn for a busy row (a wallet's lock, its queue).
    pub fn db_lock_wait(&self) -> Duration {
        Duration::from_millis(self.config.db_lock_timeout_ms)
    }

    /// The browser origins as this replica holds them: a change made on another replica
    /// shows here within `CORS_TTL`.
    pub async fn cors_origins(
        &self,
    ) -> Result<Arc<crate::domain::platform::cors::CorsOrigins>, ApiError> {
        if let Some(c) = self.cors.get(&()) {
            return Ok(c);
        }
        let c = Arc::new(crate::domain::platform::cors::CorsOrigins::load(&self.db).await?);
        self.cors.insert((), c.clone());
        Ok(c)
    }

    /// What the idempotency layer needs.
    pub fn idempotency(&self) -> crate::idempotency::Ctx<'_> {
        crate::idempotency::Ctx {
            db: &self.db,
            kv: &self.kv,
            sealer: &self.sealer,
            ttl: chrono::Duration::hours(i64::from(self.config.idempotency_ttl_hours)),
            wait: Duration::from_millis(self.config.idempotency_wait_ms),
            recent: &self.recent_responses,
        }
    }

    /// The identify rate and the failed-credential blocks (`domain::credentials::guessing`).
    pub fn guard(&self) -> crate::domain::credentials::guessing::Guard<'_> {
        crate::domain::credentials::guessing::Guard {
            kv: &self.kv,
            config: &self.config,
            db: &self.db,
        }
    }

    /// What a payment passes before its transaction opens (`domain::payments::admission`).
    pub fn admission(&self) -> crate::domain::payments::admission::Admission<'_> {
        crate::domain::payments::admission::Admission {
            db: &self.db,
            sealer: &self.sealer,
            guard: self.guard(),
            wallet_queue: &self.wallet_queue,
            lock_wait: self.db_lock_wait(),
        }
    }

    pub fn standing(&self) -> crate::domain::credentials::standing::Standing<'_> {
        crate::domain::credentials::standing::Standing {
            db: &self.db,
            kv: &self.kv,
        }
    }

    pub fn key_auth(&self) -> KeyAuth<'_> {
        KeyAuth {
            db: &self.db,
            kv: &self.kv,
            cache_ttl: Duration::from_secs(self.config.key_cache_ttl_secs),
            gate: &self.key_gate,
            cell: self.config.cell.as_deref(),
        }
    }
}

const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What `GET /health` reports: the subsystems that did not answer, and the run mode.
pub struct Health {
    pub degraded: Vec<Subsystem>,
    pub mode: &'static str,
}

impl AppState {
    /// Probes each dependency (bounded by `PROBE_TIMEOUT`) and records `subsystem_up`.
    pub async fn health(&self) -> Health {
        let (db, redis, queue) = tokio::join!(
            store::ping(&self.db, PROBE_TIMEOUT),
            tokio::time::timeout(PROBE_TIMEOUT, self.kv.ping()),
            tokio::time::timeout(PROBE_TIMEOUT, self.queue.ping()),
        );
        let mut degraded = vec![];
        if db.is_err() {
            degraded.push(Subsystem::Database);
        }
        if !matches!(redis, Ok(Ok(()))) {
            degraded.push(Subsystem::Redis);
        }
        if !matches!(queue, Ok(Ok(()))) {
            degraded.push(Subsystem::Queue);
        }
        for s in [Subsystem::Database, Subsystem::Redis, Subsystem::Queue] {
            metrics::gauge!(m::SUBSYSTEM_UP, "subsystem" => s.as_str())
                .set(if degraded.contains(&s) { 0.0 } else { 1.0 });
        }
        Health {
            degraded,
            mode: match self.config.mode() {
                Mode::Embedded => "embedded",
                Mode::Production => "production",
            },
        }
    }
}

/// How often the process gauges are refreshed: often enough for a 15 s scrape interval.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

impl AppState {
    /// Keeps the gauges every process has current while it runs: its database pool, and the
    /// subsystems (probed every few samples, so an idle process still reports them).
    /// Where a read that tolerates lag runs (the transaction and event feeds, the console):
    /// the replica while it is well and has replayed what the request's caller wrote, else
    /// the primary. Never for a read a money decision, a replay or authentication rests on.
    pub async fn lagging(&self) -> store::db::replica::LaggingRead {
        match &self.replica {
            Some(r) => r.read(crate::infra::current_request::caller()).await,
            None => store::db::replica::LaggingRead {
                db: self.db.clone(),
                served: store::db::replica::Served::Primary,
            },
        }
    }

    /// The process gauges, and the replica's probe when there is one; runs until aborted.
    pub async fn sample_process_gauges(self) {
        let replica = self.replica.clone();
        let probe = async move {
            if let Some(r) = replica {
                store::db::replica::run_probe(r).await;
            }
        };
        tokio::join!(self.sample_pool_and_health(), probe);
    }

    async fn sample_pool_and_health(self) {
        metrics::gauge!(m::DB_POOL_MAX).set(f64::from(self.config.db_max_connections));
        for n in 0u64.. {
            let (size, idle) = store::db::pool_stats(&self.db);
            let idle = idle as f64;
            metrics::gauge!(m::DB_POOL_CONNECTIONS, "state" => "idle").set(idle);
            metrics::gauge!(m::DB_POOL_CONNECTIONS, "state" => "in_use")
                .set((f64::from(size) - idle).max(0.0));
            if n % 3 == 0 {
                self.health().await;
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }
}
