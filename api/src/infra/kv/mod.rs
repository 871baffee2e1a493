//! Short-lived shared state: idempotency locks, rate-limit counters and the API-key cache.
//!
//! Production keeps it in Redis so every API replica sees the same locks, counters and cache
//! invalidations; embedded mode keeps it in this process. Nothing here is ever the only copy
//! of a money fact or an idempotency record: those live in the database. Every Redis call
//! is bounded by `redis_timeout_ms` and fails as a retryable `Unavailable(Redis)` error.
#[macro_use]
mod scripts;
mod local;
mod redis_conn;

pub use local::*;
pub use redis_conn::*;
use scripts::*;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use deadpool_redis::Runtime;
use redis::aio::MultiplexedConnection;

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

/// What `copy_or_lock` found.
#[derive(Debug, PartialEq, Eq)]
pub enum CopyOrLock {
    /// A stored copy; the lock was not touched.
    Copy(String),
    /// No copy, and this caller now holds the lock.
    Locked,
    /// No copy, and another caller holds the lock.
    Held,
}

impl Kv {
    /// The in-process store. One per process: embedded mode is a single process, so every
    /// part of it (and every app instance a test starts in it) shares one view, as
    /// production replicas share Redis.
    pub fn local() -> Self {
        static SHARED: std::sync::OnceLock<Arc<LocalKv>> = std::sync::OnceLock::new();
        Kv::Local(SHARED.get_or_init(|| Arc::new(LocalKv::default())).clone())
    }

    pub fn redis(
        url: &str,
        timeout: Duration,
        prefix: &str,
        max_size: usize,
    ) -> anyhow::Result<Self> {
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
        let pool = cfg.create_pool(Some(Runtime::Tokio1))?;
        Ok(Kv::Redis(Arc::new(RedisKv {
            pool,
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
        F: FnOnce(MultiplexedConnection) -> Fut,
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

    pub async fn ping(&self) -> Result<(), ApiError> {
        match self {
            Kv::Local(_) => Ok(()),
            Kv::Redis(r) => {
                Self::run(r, "ping", |mut c| async move {
                    redis::cmd("PING").query_async::<String>(&mut c).await
                })
                .await?;
                Ok(())
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

    /// Counts a hit in a fixed window; returns the count including this hit and the time
    /// left in the window.
    pub async fn incr_window(
        &self,
        key: &str,
        window: Duration,
    ) -> Result<(u64, Duration), ApiError> {
        match self {
            Kv::Local(l) => Ok(l.incr_window(key, window)),
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                let ms = window.as_millis() as u64;
                let (n, ttl): (u64, i64) = Self::run(r, "incr_window", |mut c| async move {
                    script!(INCR_WINDOW)
                        .key(k)
                        .arg(ms)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
                Ok((n, Duration::from_millis(ttl.max(0) as u64)))
            }
        }
    }

    /// One request against a GCRA limit of `window / interval` requests per `window`.
    pub async fn gcra(
        &self,
        key: &str,
        interval: Duration,
        window: Duration,
    ) -> Result<Gcra, ApiError> {
        match self {
            Kv::Local(l) => Ok(l.gcra(key, interval, window)),
            Kv::Redis(r) => {
                // Its own key name since the state moved from ms to µs: a replica of the
                // previous version never reads a µs state as ms during a rolling deploy.
                let k = Self::key(r, &format!("{key}:us"));
                let (i, w) = (
                    (interval.as_micros() as u64).max(1),
                    window.as_micros() as u64,
                );
                let (allowed, retry_after, reset): (i64, i64, i64) =
                    Self::run(r, "gcra", |mut c| async move {
                        script!(GCRA)
                            .key(k)
                            .arg(i)
                            .arg(w)
                            .invoke_async(&mut c)
                            .await
                    })
                    .await?;
                Ok(Gcra {
                    allowed: allowed == 1,
                    retry_after: Duration::from_micros(retry_after.max(0) as u64),
                    reset: Duration::from_micros(reset.max(0) as u64),
                })
            }
        }
    }

    /// The copy under `copy_key` if there is one; otherwise `SET lock_key token NX PX ttl`.
    /// One round trip.
    pub async fn copy_or_lock(
        &self,
        copy_key: &str,
        lock_key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<CopyOrLock, ApiError> {
        match self {
            Kv::Local(l) => Ok(match l.get(copy_key) {
                Some(v) => CopyOrLock::Copy(v),
                None if l.set_nx(lock_key, token, ttl) => CopyOrLock::Locked,
                None => CopyOrLock::Held,
            }),
            Kv::Redis(r) => {
                let (ck, lk) = (Self::key(r, copy_key), Self::key(r, lock_key));
                let (t, ms) = (token.to_string(), ttl.as_millis() as u64);
                let mut reply: Vec<String> = Self::run(r, "copy_or_lock", |mut c| async move {
                    script!(COPY_OR_LOCK)
                        .key(ck)
                        .key(lk)
                        .arg(t)
                        .arg(ms)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
                Ok(match reply.first().map(String::as_str) {
                    Some("copy") if reply.len() == 2 => CopyOrLock::Copy(reply.remove(1)),
                    Some("locked") => CopyOrLock::Locked,
                    _ => CopyOrLock::Held,
                })
            }
        }
    }

    /// Stores each of `copies` for `ttl`, then deletes `lock_key` if it still holds `token`.
    /// One round trip.
    pub async fn copy_and_release(
        &self,
        copies: &[(String, &str)],
        ttl: Duration,
        lock_key: &str,
        token: &str,
    ) -> Result<(), ApiError> {
        match self {
            Kv::Local(l) => {
                for (k, v) in copies {
                    l.set(k, v, ttl);
                }
                l.del_if_eq(lock_key, token);
                Ok(())
            }
            Kv::Redis(r) => {
                let mut inv = script!(COPY_AND_RELEASE).key(Self::key(r, lock_key));
                for (k, _) in copies {
                    inv.key(Self::key(r, k));
                }
                inv.arg(token).arg(ttl.as_millis() as u64);
                for (_, v) in copies {
                    inv.arg(*v);
                }
                Self::run(r, "copy_and_release", |mut c| async move {
                    inv.invoke_async::<i64>(&mut c).await
                })
                .await?;
                Ok(())
            }
        }
    }

    /// Stores `value` under `key` and `index_value` under `index_key`, unless `tombstone`
    /// exists. Returns whether it stored.
    pub async fn guarded_set(
        &self,
        key: &str,
        value: &str,
        index_key: &str,
        index_value: &str,
        tombstone: &str,
        ttl: Duration,
    ) -> Result<bool, ApiError> {
        match self {
            Kv::Local(l) => Ok(l.guarded_set(key, value, index_key, index_value, tombstone, ttl)),
            Kv::Redis(r) => {
                let (k1, k2, k3) = (
                    Self::key(r, key),
                    Self::key(r, index_key),
                    Self::key(r, tombstone),
                );
                let (v, iv) = (value.to_string(), index_value.to_string());
                let ms = ttl.as_millis() as u64;
                let n: i64 = Self::run(r, "guarded_set", |mut c| async move {
                    script!(GUARDED_SET)
                        .key(k1)
                        .key(k2)
                        .key(k3)
                        .arg(v)
                        .arg(ms)
                        .arg(iv)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
                Ok(n == 1)
            }
        }
    }
}

/// The outcome of one GCRA check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    pub allowed: bool,
    /// When the next request would be allowed (zero when this one was).
    pub retry_after: Duration,
    /// Until the limit is back to its full burst.
    pub reset: Duration,
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
        kv.copy_and_release(&[], ttl, "l", "b").await.unwrap();
        assert_eq!(
            kv.copy_or_lock("c", "l", "b", ttl).await.unwrap(),
            CopyOrLock::Held
        );
        kv.copy_and_release(&[("c".to_string(), "resp")], ttl, "l", "a")
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
