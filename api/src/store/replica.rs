//! A streaming replica for the reads that tolerate lag (`WALLET_DATABASE_REPLICA_URL`,
//! docs/scaling.md section 2): the transaction feed and detail, the events feed, and the
//! operations console's pages. Balances, idempotency, authentication and every read a money
//! decision rests on stay on the primary: they never come here.
//!
//! A read served by the replica still sees every write committed before it began. Before
//! the replica serves a request, the primary's WAL insert position is read and the
//! replica must have replayed up to it (the insert position covers a commit made with
//! `synchronous_commit = off`, whose WAL may not be written out yet); a replica not there within
//! `WALLET_REPLICA_WAIT_MS` leaves that request to the primary. Replay only moves forward,
//! so every statement of the request then sees at least that much. Both checks are
//! single simple-protocol statements, which a transaction-mode pooler carries as they are.
//!
//! Beside that, a probe (`run_probe`) measures the replica's lag every second for the
//! metrics. A replica that stopped answering, fell further behind than
//! `WALLET_REPLICA_MAX_LAG_MS` or is no longer a standby (promoted: its history may part
//! from the primary's) is skipped until a probe finds it well again, so requests do not
//! wait on it. A statement that fails on the replica (it went away mid-request, or a
//! query was cancelled by a conflict with recovery) is run again on the primary.
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use sea_orm::sqlx::{self, Row};

use super::pooler::Db;
use crate::infra::telemetry::metrics as m;

/// How often the probe measures the replica.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Where a lag-tolerant read was served (`meta.capabilities.served_from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    Primary,
    Replica,
}

impl Served {
    pub fn as_str(self) -> &'static str {
        match self {
            Served::Primary => "primary",
            Served::Replica => "replica",
        }
    }
}

/// The database a lag-tolerant read runs on, and which one it is.
#[derive(Clone, Debug)]
pub struct LaggingRead {
    pub db: Db,
    pub served: Served,
}

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lag {
    /// Time since the last transaction the replica replayed committed, while it has not
    /// replayed all the primary had; 0 when it has.
    pub seconds: f64,
    pub bytes: i64,
}

pub struct Replica {
    /// The replica; a statement that fails on it runs again on the primary.
    db: Db,
    primary: Db,
    /// Whether requests may be served by the replica, as of the last probe.
    usable: Arc<AtomicBool>,
    max_lag: Duration,
    wait: Duration,
}

impl Replica {
    pub fn new(replica: Db, primary: Db, max_lag: Duration, wait: Duration) -> Replica {
        let usable = Arc::new(AtomicBool::new(false));
        Replica {
            db: replica.falling_back_to(primary.clone(), usable.clone()),
            primary,
            usable,
            max_lag,
            wait,
        }
    }

    /// Whether the last probe let requests use the replica (what `wallet_db_replica_usable`
    /// exports; the gauge is one per process, this is one per replica).
    pub fn usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    /// The database a lag-tolerant read should use now.
    pub async fn read(&self) -> LaggingRead {
        let served = if self.usable.load(Ordering::Relaxed) && self.caught_up().await {
            Served::Replica
        } else {
            Served::Primary
        };
        metrics::counter!(m::DB_LAGGING_READS, "served_from" => served.as_str()).increment(1);
        LaggingRead {
            db: match served {
                Served::Replica => self.db.clone(),
                Served::Primary => self.primary.clone(),
            },
            served,
        }
    }

    /// Whether the replica has replayed every write the primary committed so far, waiting
    /// for it up to `wait`.
    async fn caught_up(&self) -> bool {
        // The insert position, not the written one: a commit made with `synchronous_commit`
        // off answers its caller while its WAL is still in the primary's buffers, before
        // `pg_current_wal_lsn()` (what has been written out) covers it.
        let Ok(lsn) = position(&self.primary, "SELECT pg_current_wal_insert_lsn()::text").await
        else {
            return false;
        };
        let check = format!("SELECT (pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn)::text");
        let until = Instant::now() + self.wait;
        loop {
            match position(&self.db, &check).await.as_deref() {
                Ok("true") => return true,
                Ok(_) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                _ => return false,
            }
        }
    }

    /// Measures the replica's lag, records it and decides whether requests may use it.
    pub async fn probe(&self) -> Result<Lag, String> {
        let found = self.measure().await;
        let usable = matches!(&found, Ok(lag) if lag.seconds <= self.max_lag.as_secs_f64());
        let was = self.usable.swap(usable, Ordering::Relaxed);
        metrics::gauge!(m::DB_REPLICA_USABLE).set(if usable { 1.0 } else { 0.0 });
        match &found {
            Ok(lag) => {
                metrics::gauge!(m::DB_REPLICA_LAG).set(lag.seconds);
                metrics::gauge!(m::DB_REPLICA_LAG_BYTES).set(lag.bytes as f64);
                if was && !usable {
                    tracing::warn!(
                        lag_seconds = lag.seconds,
                        max_lag_ms = self.max_lag.as_millis() as u64,
                        "the read replica fell behind: lag-tolerant reads go to the primary"
                    );
                }
            }
            Err(e) if was => {
                tracing::warn!(error = %e, "the read replica is unavailable: lag-tolerant reads go to the primary");
            }
            Err(_) => {}
        }
        if usable && !was {
            tracing::info!("the read replica serves lag-tolerant reads");
        }
        found
    }

    async fn measure(&self) -> Result<Lag, String> {
        let lsn = position(&self.primary, "SELECT pg_current_wal_lsn()::text")
            .await
            .map_err(|e| format!("primary: {e}"))?;
        let pool = self.db.connection().get_postgres_connection_pool();
        let sql = format!(
            "SELECT pg_is_in_recovery() AS standby, \
             CASE WHEN pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn THEN 0 \
             ELSE EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()) END::float8 AS seconds, \
             GREATEST(pg_wal_lsn_diff('{lsn}'::pg_lsn, pg_last_wal_replay_lsn()), 0)::bigint AS bytes"
        );
        let row = tokio::time::timeout(
            PROBE_EVERY,
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_one(pool),
        )
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
        let standby: bool = row.try_get("standby").map_err(|e| e.to_string())?;
        if !standby {
            return Err("not a standby (promoted?): its data may part from the primary's".into());
        }
        let seconds: Option<f64> = row.try_get("seconds").map_err(|e| e.to_string())?;
        let bytes: Option<i64> = row.try_get("bytes").map_err(|e| e.to_string())?;
        Ok(Lag {
            // Nothing replayed yet since it started: as far behind as can be told.
            seconds: seconds.unwrap_or(f64::INFINITY).max(0.0),
            bytes: bytes.unwrap_or(0),
        })
    }
}

/// One `text` value from a simple-protocol statement on `db`'s pool (a WAL position, a
/// comparison). `sql` is built by this module from constants and server-given positions.
async fn position(db: &Db, sql: &str) -> Result<String, sqlx::Error> {
    let pool = db.connection().get_postgres_connection_pool();
    let row = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(pool)
        .await?;
    let text: Option<String> = row.try_get(0)?;
    let text = text.unwrap_or_default();
    // Only a WAL position (`16/B374D848`) or a boolean is ever interpolated back.
    if text
        .chars()
        .all(|c| c.is_ascii_hexdigit() || c == '/' || c.is_ascii_lowercase())
    {
        Ok(text)
    } else {
        Err(sqlx::Error::Protocol(format!("unexpected value {text:?}")))
    }
}

/// Probes `replica` every `PROBE_EVERY`, for as long as the task runs.
pub async fn run_probe(replica: Arc<Replica>) {
    loop {
        let _ = replica.probe().await;
        tokio::time::sleep(PROBE_EVERY).await;
    }
}
