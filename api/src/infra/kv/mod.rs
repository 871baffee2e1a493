//! Short-lived shared state: idempotency locks, rate-limit counters and the API-key cache.
//!
//! Production keeps it in Redis so every API replica sees the same locks, counters and cache
//! invalidations; embedded mode keeps it in this process. Nothing here is ever the only copy
//! of a money fact or an idempotency record: those live in the database. Every Redis call
//! is bounded by `redis_timeout_ms` and fails as a retryable `Unavailable(Redis)` error.
#[macro_use]
mod scripts;
mod compound;
mod counters;
pub mod idempotency_keys;
mod local;
mod redis_conn;

pub use compound::*;
pub use counters::*;
pub use local::*;
pub use redis_conn::*;
use scripts::*;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use deadpool_redis::Runtime;

use crate::config::RedisMode;
use crate::error::{ApiError, Subsystem};
use crate::infra::telemetry::metrics as m;

#[derive(Clone)]
pub enum Kv {
    Redis(Arc<RedisKv>),
    Local(Arc<LocalKv>),
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable {
        subsystem: Subsystem::Redis,
        cause: e.to_string(),
    }
}

impl Kv {
    /// The in-process store. One per process: embedded mode is a single process, so every
    /// part of it (and every app instance a test starts in it) shares one view, as
    /// production replicas share Redis.
    pub fn local() -> Self {
        static SHARED: std::sync::OnceLock<Arc<LocalKv>> = std::sync::OnceLock::new();
        Kv::Local(SHARED.get_or_init(|| Arc::new(LocalKv::default())).clone())
    }

    /// Redis at `urls`: one server, or a cluster's seed nodes.
    pub fn redis(
        urls: &[&str],
        mode: RedisMode,
        timeout: Duration,
        prefix: &str,
        max_size: usize,
    ) -> anyhow::Result<Self> {
        let connector = match mode {
            RedisMode::Standalone => {
                let url = urls.first().copied().unwrap_or_default();
                let mut cfg = deadpool_redis::Config::from_url(url);
                cfg.pool = Some(deadpool_redis::PoolConfig {
                    max_size,
                    timeouts: deadpool_redis::Timeouts {
                        wait: Some(timeout),
                        create: Some(timeout),
                        recycle: Some(timeout),
                    },
                    ..Default::default()
                });
                Connector::Standalone(cfg.create_pool(Some(Runtime::Tokio1))?)
            }
            // A node that went away is retried briefly, not the client's default sixteen
            // times: a call is bounded by `timeout` anyway, and a caller is better served
            // by a fast retryable 503 than by a wait that ends in one. Slot moves (MOVED,
            // ASK) are followed whatever the count.
            RedisMode::Cluster => Connector::Cluster(Box::new(
                redis::cluster::ClusterClient::builder(urls.iter().map(|u| u.to_string()))
                    .retries(2)
                    .min_retry_wait(10)
                    .max_retry_wait(100)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()?,
            )),
        };
        Ok(Kv::Redis(Arc::new(RedisKv {
            connector,
            shared: Mutex::new(None),
            timeout,
            prefix: prefix.to_string(),
        })))
    }

    pub fn is_redis(&self) -> bool {
        matches!(self, Kv::Redis(_))
    }

    /// One Redis call, bounded by the timeout and measured under `op` (this type's method
    /// name: a small, fixed set of label values).
    async fn run<T, F, Fut>(r: &RedisKv, op: &'static str, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let started = std::time::Instant::now();
        let work = async {
            let conn = r.connection().await?;
            f(conn).await.map_err(|e| {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    r.forget_connection();
                }
                unavailable(e)
            })
        };
        let (done, failure) = match tokio::time::timeout(r.timeout, work).await {
            Ok(Ok(v)) => (Ok(v), None),
            Ok(Err(e)) => (Err(e), Some("error")),
            Err(_) => {
                // A connection that stopped answering is not reused.
                r.forget_connection();
                (Err(unavailable("redis call timed out")), Some("timeout"))
            }
        };
        metrics::histogram!(m::REDIS_COMMAND_DURATION, "command" => op)
            .record(started.elapsed().as_secs_f64());
        if let Some(kind) = failure {
            metrics::counter!(m::REDIS_ERRORS, "command" => op, "kind" => kind).increment(1);
        }
        done
    }

    fn key(r: &RedisKv, k: &str) -> String {
        format!("{}{}", r.prefix, k)
    }

    /// Whether Redis answers: the server, or on a cluster every master. A plain PING goes
    /// to one node at random, so a cluster with one master down (every call routed to its
    /// slots failing) still answered it.
    pub async fn ping(&self) -> Result<(), ApiError> {
        match self {
            Kv::Local(_) => Ok(()),
            Kv::Redis(r) => {
                Self::run(r, "ping", |c| async move {
                    match c {
                        Conn::Cluster(cluster) => redis_conn::ping_every_master(cluster).await,
                        mut c @ Conn::Standalone(_) => redis::cmd("PING")
                            .query_async::<String>(&mut c)
                            .await
                            .map(drop),
                    }
                })
                .await
            }
        }
    }

    pub async fn get(&self, key: &str) -> Result<Option<String>, ApiError> {
        match self {
            Kv::Local(l) => Ok(l.get(key)),
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                Self::run(r, "get", |mut c| async move {
                    redis::cmd("GET")
                        .arg(k)
                        .query_async::<Option<String>>(&mut c)
                        .await
                })
                .await
            }
        }
    }

    /// Several keys in one round trip.
    pub async fn mget(&self, keys: &[String]) -> Result<Vec<Option<String>>, ApiError> {
        match self {
            Kv::Local(l) => Ok(keys.iter().map(|k| l.get(k)).collect()),
            Kv::Redis(r) => {
                let ks: Vec<String> = keys.iter().map(|k| Self::key(r, k)).collect();
                Self::run(r, "mget", |mut c| async move {
                    redis::cmd("MGET")
                        .arg(ks)
                        .query_async::<Vec<Option<String>>>(&mut c)
                        .await
                })
                .await
            }
        }
    }

    pub async fn set_px(&self, key: &str, value: &str, ttl: Duration) -> Result<(), ApiError> {
        match self {
            Kv::Local(l) => {
                l.set(key, value, ttl);
                Ok(())
            }
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                let v = value.to_string();
                let ms = ttl.as_millis() as u64;
                Self::run(r, "set_px", |mut c| async move {
                    redis::cmd("SET")
                        .arg(k)
                        .arg(v)
                        .arg("PX")
                        .arg(ms)
                        .query_async::<()>(&mut c)
                        .await
                })
                .await
            }
        }
    }

    /// `SET key value NX PX ttl`: true when this caller now holds the key.
    pub async fn set_nx_px(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, ApiError> {
        match self {
            Kv::Local(l) => Ok(l.set_nx(key, value, ttl)),
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                let v = value.to_string();
                let ms = ttl.as_millis() as u64;
                let res: Option<String> = Self::run(r, "set_nx_px", |mut c| async move {
                    redis::cmd("SET")
                        .arg(k)
                        .arg(v)
                        .arg("NX")
                        .arg("PX")
                        .arg(ms)
                        .query_async(&mut c)
                        .await
                })
                .await?;
                Ok(res.is_some())
            }
        }
    }

    /// Stores `value` under `key` unless it holds a greater one, and keeps it `ttl` from
    /// now either way. Values of one key must be of equal width (compared as text).
    pub async fn keep_greater(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), ApiError> {
        match self {
            Kv::Local(l) => {
                l.keep_greater(key, value, ttl);
                Ok(())
            }
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                let v = value.to_string();
                let ms = ttl.as_millis() as u64;
                Self::run(r, "keep_greater", |mut c| async move {
                    script!(KEEP_GREATER)
                        .key(k)
                        .arg(v)
                        .arg(ms)
                        .invoke_async::<i64>(&mut c)
                        .await
                })
                .await?;
                Ok(())
            }
        }
    }

    /// Deletes `key` only while it still holds `value` (a lock released by its owner).
    pub async fn del_if_eq(&self, key: &str, value: &str) -> Result<(), ApiError> {
        match self {
            Kv::Local(l) => {
                l.del_if_eq(key, value);
                Ok(())
            }
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                let v = value.to_string();
                Self::run(r, "del_if_eq", |mut c| async move {
                    script!(DEL_IF_EQ)
                        .key(k)
                        .arg(v)
                        .invoke_async::<i64>(&mut c)
                        .await
                })
                .await?;
                Ok(())
            }
        }
    }

    /// Renews `key`'s expiry to `ttl` while it still holds `value` (a lock's lease renewed
    /// by its holder); false when it no longer does.
    pub async fn extend_if_eq(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, ApiError> {
        match self {
            Kv::Local(l) => Ok(l.extend_if_eq(key, value, ttl)),
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                let v = value.to_string();
                let ms = ttl.as_millis() as u64;
                let n = Self::run(r, "extend_if_eq", |mut c| async move {
                    script!(EXTEND_IF_EQ)
                        .key(k)
                        .arg(v)
                        .arg(ms)
                        .invoke_async::<i64>(&mut c)
                        .await
                })
                .await?;
                Ok(n == 1)
            }
        }
    }

    pub async fn del(&self, keys: &[String]) -> Result<(), ApiError> {
        if keys.is_empty() {
            return Ok(());
        }
        match self {
            Kv::Local(l) => {
                for k in keys {
                    l.del(k);
                }
                Ok(())
            }
            Kv::Redis(r) => {
                let ks: Vec<String> = keys.iter().map(|k| Self::key(r, k)).collect();
                Self::run(r, "del", |mut c| async move {
                    redis::cmd("DEL").arg(ks).query_async::<i64>(&mut c).await
                })
                .await?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lock_is_held_once_and_released_only_by_its_owner() {
        let kv = Kv::local();
        let ttl = Duration::from_secs(5);
        assert!(kv.set_nx_px("l", "a", ttl).await.unwrap());
        assert!(!kv.set_nx_px("l", "b", ttl).await.unwrap());
        kv.del_if_eq("l", "b").await.unwrap();
        assert!(!kv.set_nx_px("l", "b", ttl).await.unwrap());
        kv.del_if_eq("l", "a").await.unwrap();
        assert!(kv.set_nx_px("l", "b", ttl).await.unwrap());
    }

    #[tokio::test]
    async fn a_copy_is_returned_before_any_lock_and_release_stores_the_copy_and_frees_the_lock() {
        let kv = Kv::Local(Arc::new(LocalKv::default()));
        let ttl = Duration::from_secs(5);
        assert_eq!(
            kv.copy_or_lock("c", "l", "a", ttl).await.unwrap(),
            CopyOrLock::Locked
        );
        assert_eq!(
            kv.copy_or_lock("c", "l", "b", ttl).await.unwrap(),
            CopyOrLock::Held
        );
        // Another holder's release neither frees the lock nor matters to the copy.
        kv.copy_and_release("l", "b", None, &[], ttl).await.unwrap();
        assert_eq!(
            kv.copy_or_lock("c", "l", "b", ttl).await.unwrap(),
            CopyOrLock::Held
        );
        kv.copy_and_release("l", "a", Some(("c", "resp")), &[], ttl)
            .await
            .unwrap();
        assert_eq!(
            kv.copy_or_lock("c", "l", "b", ttl).await.unwrap(),
            CopyOrLock::Copy("resp".into())
        );
        assert!(
            kv.set_nx_px("l", "b", ttl).await.unwrap(),
            "the owner's release freed the lock"
        );
    }

    #[tokio::test]
    async fn a_tombstone_blocks_a_cache_fill() {
        let kv = Kv::local();
        let ttl = Duration::from_secs(5);
        kv.set_px("tomb", "1", ttl).await.unwrap();
        assert!(
            !kv.guarded_set("c", "v", "i", "c", "tomb", ttl)
                .await
                .unwrap()
        );
        assert_eq!(kv.get("c").await.unwrap(), None);
        assert!(
            kv.guarded_set("c", "v", "i", "c", "other", ttl)
                .await
                .unwrap()
        );
        assert_eq!(kv.get("c").await.unwrap().as_deref(), Some("v"));
    }

    #[tokio::test]
    async fn gcra_allows_a_burst_of_the_limit_then_one_per_interval() {
        let kv = Kv::local();
        let (i, w) = (Duration::from_millis(20), Duration::from_millis(100));
        for n in 0..5 {
            assert!(
                kv.gcra("g", i, w).await.unwrap().allowed,
                "request {n} of the burst"
            );
        }
        let denied = kv.gcra("g", i, w).await.unwrap();
        assert!(!denied.allowed);
        assert!(denied.retry_after > Duration::ZERO && denied.retry_after <= i);
        tokio::time::sleep(i + Duration::from_millis(5)).await;
        assert!(
            kv.gcra("g", i, w).await.unwrap().allowed,
            "one more after an interval"
        );
    }

    #[tokio::test]
    async fn window_counts_restart_after_the_window() {
        let kv = Kv::local();
        let w = Duration::from_millis(50);
        assert_eq!(kv.incr_window("r", w).await.unwrap().0, 1);
        assert_eq!(kv.incr_window("r", w).await.unwrap().0, 2);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(kv.incr_window("r", w).await.unwrap().0, 1);
    }
}
