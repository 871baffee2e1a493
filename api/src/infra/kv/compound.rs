//! Operations over several keys: the idempotency lock with its response copy, and the
//! API-key cache fill guarded by a revocation's tombstone. Keys one script touches share a
//! hash tag (docs/scaling.md section 3).
use std::time::Duration;

use super::{Kv, scripts::*};
use crate::error::ApiError;

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

    /// Stores `copy` (a key in `lock_key`'s hash slot) for `ttl` and deletes `lock_key` if
    /// it still holds `token`, atomically; stores each of `beside` (keys in any slot) for
    /// `ttl` at the same time. One round trip.
    pub async fn copy_and_release(
        &self,
        lock_key: &str,
        token: &str,
        copy: Option<(&str, &str)>,
        beside: &[(String, &str)],
        ttl: Duration,
    ) -> Result<(), ApiError> {
        match self {
            Kv::Local(l) => {
                for (k, v) in copy
                    .iter()
                    .copied()
                    .chain(beside.iter().map(|(k, v)| (k.as_str(), *v)))
                {
                    l.set(k, v, ttl);
                }
                l.del_if_eq(lock_key, token);
                Ok(())
            }
            Kv::Redis(r) => {
                let ms = ttl.as_millis() as u64;
                let mut release = script!(COPY_AND_RELEASE).key(Self::key(r, lock_key));
                release.arg(token).arg(ms);
                if let Some((k, v)) = copy {
                    release.key(Self::key(r, k)).arg(v);
                }
                let sets: Vec<redis::Cmd> = beside
                    .iter()
                    .map(|(k, v)| {
                        let mut set = redis::cmd("SET");
                        set.arg(Self::key(r, k)).arg(*v).arg("PX").arg(ms);
                        set
                    })
                    .collect();
                Self::run(r, "copy_and_release", |c| async move {
                    let stored = futures::future::try_join_all(sets.iter().map(|set| {
                        let mut c = c.clone();
                        async move { set.query_async::<()>(&mut c).await }
                    }));
                    let mut c = c.clone();
                    let released = release.invoke_async::<i64>(&mut c);
                    futures::try_join!(stored, released).map(|_| ())
                })
                .await
            }
        }
    }

    /// Stores `value` under `key` and `index_value` under `index_key`, unless `tombstone`
    /// exists. Returns whether it stored.
    ///
    /// The three keys may sit in different slots of a cluster, so this is not one script:
    /// the index is written, then the entry, and only then is the tombstone looked at; an
    /// entry that finds one is taken back. Whoever sets the tombstone deletes what the
    /// index names after setting it, so an entry either sees the tombstone or is deleted
    /// by its setter: none outlives it.
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
            Kv::Redis(_) => {
                self.set_px(index_key, index_value, ttl).await?;
                self.set_px(key, value, ttl).await?;
                if self.get(tombstone).await?.is_some() {
                    self.del(&[key.to_string()]).await?;
                    return Ok(false);
                }
                Ok(true)
            }
        }
    }
}
