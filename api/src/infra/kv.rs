//! Short-lived shared state: idempotency locks, rate-limit counters and the API-key cache.
//!
//! Production keeps it in Redis so every API replica sees the same locks, counters and cache
//! invalidations; embedded mode keeps it in this process. Nothing here is ever the only copy
//! of a money fact or an idempotency record: those live in the database. Every Redis call
//! is bounded by `redis_timeout_ms` and fails as a retryable `Unavailable(Redis)` error.
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use deadpool_redis::{Pool, Runtime};
use redis::aio::MultiplexedConnection;

use crate::error::{ApiError, Subsystem};

#[derive(Clone)]
pub enum Kv {
    Redis(Arc<RedisKv>),
    Local(Arc<LocalKv>),
}

pub struct RedisKv {
    pool: Pool,
    /// The connection every call shares. A multiplexed connection pipelines concurrent
    /// commands over one socket, so it needs no pool of its own; taking a pooled object per
    /// call would cost deadpool's recycle check (an UNWATCH + PING round trip) on every call,
    /// doubling each call's round trips. The pool still creates and health-checks it: after
    /// a connection error or a timeout the shared one is dropped and the next call takes a
    /// fresh, checked one from the pool.
    shared: Mutex<Option<MultiplexedConnection>>,
    timeout: Duration,
    prefix: String,
}

#[derive(Default)]
pub struct LocalKv {
    map: Mutex<HashMap<String, (String, Option<Instant>)>>,
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable {
        subsystem: Subsystem::Redis,
        cause: e.to_string(),
    }
}

// Sets the cache entry and its reverse index only if no tombstone exists, atomically, so a
// fill racing with a revoke can never leave a live entry behind the revoke.
const GUARDED_SET: &str = r#"
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
return 1
"#;

// GCRA on Redis' own clock (replicas may disagree about the time; Redis does not).
// KEYS[1] holds the theoretical arrival time in µs. ARGV: emission interval, window (µs).
// Returns {allowed, retry_after_us, reset_us}. Microseconds, because a high limit's
// interval is under a millisecond (1,000,000 a minute: 60 µs): counted in ms it rounded to
// 0 and the key's expiry, `PX 0`, was an error. The expiry is whole ms, at least 1.
const GCRA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - window
if now < allow_at then
  return {0, allow_at - now, tat - now}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.max(1, math.ceil((new_tat - now) / 1000)))
return {1, 0, new_tat - now}
"#;

// Deletes a lock only if this holder still owns it.
const DEL_IF_EQ: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

// A lock's lease renewed by its holder: the expiry moves only while it still holds it.
const EXTEND_IF_EQ: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"#;

// A recent response copy if there is one; only when there is none, the in-flight lock. One
// round trip where a GET and a SET NX took two. KEYS: copy, lock. ARGV: token, ttl (ms).
const COPY_OR_LOCK: &str = r#"
local v = redis.call('GET', KEYS[1])
if v then return {'copy', v} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'locked'} end
return {'held'}
"#;

// Stores the response copies, then releases the lock if this holder still owns it.
// KEYS: lock, copies... ARGV: token, ttl (ms), one value per copy.
const COPY_AND_RELEASE: &str = r#"
for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[i + 1], 'PX', ARGV[2]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"#;

/// A script, hashed once per process (EVALSHA, falling back to EVAL after a Redis restart).
fn script(cell: &'static std::sync::OnceLock<redis::Script>, src: &str) -> &'static redis::Script {
    cell.get_or_init(|| redis::Script::new(src))
}

macro_rules! script {
    ($src:expr) => {{
        static CELL: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        script(&CELL, $src)
    }};
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

// Fixed window counter: INCR, set the expiry on the first hit, return count and ms left.
const INCR_WINDOW: &str = r#"
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
return {n, ttl}
"#;

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

    async fn run<T, F, Fut>(r: &RedisKv, f: F) -> Result<T, ApiError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let work = async {
            let conn = r.connection().await?;
            f(conn).await.map_err(|e| {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    r.forget_connection();
                }
                unavailable(e)
            })
        };
        match tokio::time::timeout(r.timeout, work).await {
            Ok(result) => result,
            Err(_) => {
                // A connection that stopped answering is not reused.
                r.forget_connection();
                Err(unavailable("redis call timed out"))
            }
        }
    }

    fn key(r: &RedisKv, k: &str) -> String {
        format!("{}{}", r.prefix, k)
    }

    pub async fn ping(&self) -> Result<(), ApiError> {
        match self {
            Kv::Local(_) => Ok(()),
            Kv::Redis(r) => {
                Self::run(r, |mut c| async move {
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
                Self::run(r, |mut c| async move {
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
                Self::run(r, |mut c| async move {
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
                Self::run(r, |mut c| async move {
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
                let res: Option<String> = Self::run(r, |mut c| async move {
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
                Self::run(r, |mut c| async move {
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
                let n = Self::run(r, |mut c| async move {
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
                Self::run(r, |mut c| async move {
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
                let (n, ttl): (u64, i64) = Self::run(r, |mut c| async move {
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
                    Self::run(r, |mut c| async move {
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
                let mut reply: Vec<String> = Self::run(r, |mut c| async move {
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
                Self::run(
                    r,
                    |mut c| async move { inv.invoke_async::<i64>(&mut c).await },
                )
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
                let n: i64 = Self::run(r, |mut c| async move {
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

impl RedisKv {
    async fn connection(&self) -> Result<MultiplexedConnection, ApiError> {
        if let Some(c) = self.shared.lock().expect("redis connection slot").clone() {
            return Ok(c);
        }
        // Boxed: the pool's checkout is a state machine of several kilobytes, which every
        // call's future (and every future awaiting one, up to the request's) would
        // otherwise carry and copy, though only the first call after a failure needs it.
        Box::pin(self.fresh_connection()).await
    }

    async fn fresh_connection(&self) -> Result<MultiplexedConnection, ApiError> {
        let pooled = self.pool.get().await.map_err(unavailable)?;
        let conn = deadpool_redis::Connection::take(pooled);
        let mut slot = self.shared.lock().expect("redis connection slot");
        // Calls that found the slot empty at once all fetched one; the first stored wins.
        Ok(slot.get_or_insert(conn).clone())
    }

    fn forget_connection(&self) {
        self.shared.lock().expect("redis connection slot").take();
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

impl LocalKv {
    fn gcra(&self, key: &str, interval: Duration, window: Duration) -> Gcra {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let epoch = *EPOCH.get_or_init(Instant::now);
        let mut m = self.lock();
        let now = epoch.elapsed().as_millis() as u64;
        let (i, w) = (interval.as_millis() as u64, window.as_millis() as u64);
        let tat = m
            .get(key)
            .filter(|e| Self::live(e))
            .and_then(|e| e.0.parse::<u64>().ok())
            .unwrap_or(now)
            .max(now);
        let new_tat = tat + i;
        let allow_at = new_tat.saturating_sub(w);
        if now < allow_at {
            return Gcra {
                allowed: false,
                retry_after: Duration::from_millis(allow_at - now),
                reset: Duration::from_millis(tat - now),
            };
        }
        m.insert(
            key.to_string(),
            (
                new_tat.to_string(),
                Some(Instant::now() + Duration::from_millis(new_tat - now)),
            ),
        );
        Gcra {
            allowed: true,
            retry_after: Duration::ZERO,
            reset: Duration::from_millis(new_tat - now),
        }
    }

    fn live(entry: &(String, Option<Instant>)) -> bool {
        entry.1.is_none_or(|t| t > Instant::now())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Option<Instant>)>> {
        // A poisoned map only means another thread panicked mid-update of a cache; the data
        // is still a valid map.
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() > 100_000 {
            m.retain(|_, v| Self::live(v));
        }
        m
    }

    fn get(&self, key: &str) -> Option<String> {
        self.lock()
            .get(key)
            .filter(|e| Self::live(e))
            .map(|e| e.0.clone())
    }

    fn set(&self, key: &str, value: &str, ttl: Duration) {
        self.lock().insert(
            key.to_string(),
            (value.to_string(), Some(Instant::now() + ttl)),
        );
    }

    fn set_nx(&self, key: &str, value: &str, ttl: Duration) -> bool {
        let mut m = self.lock();
        if m.get(key).is_some_and(Self::live) {
            return false;
        }
        m.insert(
            key.to_string(),
            (value.to_string(), Some(Instant::now() + ttl)),
        );
        true
    }

    fn del(&self, key: &str) {
        self.lock().remove(key);
    }

    fn extend_if_eq(&self, key: &str, value: &str, ttl: Duration) -> bool {
        let mut m = self.lock();
        match m.get_mut(key) {
            Some(e) if Self::live(e) && e.0 == value => {
                e.1 = Some(Instant::now() + ttl);
                true
            }
            _ => false,
        }
    }

    fn del_if_eq(&self, key: &str, value: &str) {
        let mut m = self.lock();
        if m.get(key).is_some_and(|e| e.0 == value) {
            m.remove(key);
        }
    }

    fn incr_window(&self, key: &str, window: Duration) -> (u64, Duration) {
        let mut m = self.lock();
        let now = Instant::now();
        let entry = m
            .entry(key.to_string())
            .or_insert_with(|| ("0".into(), Some(now + window)));
        if !Self::live(entry) {
            *entry = ("0".into(), Some(now + window));
        }
        let n: u64 = entry.0.parse().unwrap_or(0) + 1;
        entry.0 = n.to_string();
        let left = entry
            .1
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or(window);
        (n, left)
    }

    fn guarded_set(
        &self,
        key: &str,
        value: &str,
        index_key: &str,
        index_value: &str,
        tombstone: &str,
        ttl: Duration,
    ) -> bool {
        let mut m = self.lock();
        if m.get(tombstone).is_some_and(Self::live) {
            return false;
        }
        let exp = Some(Instant::now() + ttl);
        m.insert(key.to_string(), (value.to_string(), exp));
        m.insert(index_key.to_string(), (index_value.to_string(), exp));
        true
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
