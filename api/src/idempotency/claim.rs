//! Claiming a key: a recent copy of its response, or else the in-flight lock (renewed
//! while the work runs), released with the new copy in one round trip; the database record
//! settles what a copy cannot.
use chrono::Utc;
use std::time::Duration;

use super::{Ctx, Request, Stored, replay};

use crate::{
    envelope::Rendered, error::ApiError, infra::kv::CopyOrLock,
    infra::kv::idempotency_keys::credential_copy_key, store,
};

/// The in-flight lock is a lease: it lapses this soon after its holder stops renewing it
/// (a crashed process), so a retry then runs instead of waiting out a long TTL. The
/// database record stays the guard against a second execution; the lock only keeps
/// concurrent retries from doing the work twice only to throw one away.
pub(super) const LOCK_LEASE: Duration = Duration::from_secs(4);
/// How often a running request renews its lease.
pub(super) const LEASE_RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long Redis keeps a copy of a recent response.
pub(super) const CACHE_TTL: Duration = Duration::from_secs(600);
/// A response copy fetched together with the principal (an API key's own round trip).
pub(super) fn prefetched(r: &Request) -> Option<Stored> {
    r.prefetched
        .as_deref()
        .and_then(Stored::from_copy)
        .filter(|s| s.expires_at > Utc::now())
}

/// What a caller found when it came for the key.
pub(super) enum Claim {
    /// A recent response for the key: replay it.
    Copy(Stored),
    /// This caller holds the in-flight lock.
    Locked,
    /// Another request holds it.
    Held,
}

/// A recent copy of the key's response, or else the in-flight lock: one Redis round trip.
/// The copy is only a copy: a miss is settled by the database under the lock.
///
/// Embedded mode keeps its copies in process (see `release`); a record read under the lock
/// is copied there too, so retries of one key waiting on each other's lock find it at once.
pub(super) async fn claim(ctx: &Ctx<'_>, r: &Request, token: &str) -> Result<Claim, ApiError> {
    let now = Utc::now();
    if !ctx.kv.is_redis() {
        if let Some(s) = ctx
            .recent
            .get(&(r.owner(), r.key.clone()))
            .filter(|s| s.expires_at > now)
        {
            return Ok(Claim::Copy(s));
        }
    } else {
        match ctx
            .kv
            .copy_or_lock(&r.cache_key(), &r.lock_key(), token, LOCK_LEASE)
            .await?
        {
            CopyOrLock::Copy(text) => {
                if let Some(s) = Stored::from_copy(&text).filter(|s| s.expires_at > now) {
                    return Ok(Claim::Copy(s));
                }
                // An unreadable or stale copy: the database decides, under the lock.
            }
            CopyOrLock::Locked => return Ok(Claim::Locked),
            CopyOrLock::Held => return Ok(Claim::Held),
        }
    }
    Ok(
        if ctx.kv.set_nx_px(&r.lock_key(), token, LOCK_LEASE).await? {
            Claim::Locked
        } else {
            Claim::Held
        },
    )
}

/// The live record of this key in the database (copied for the next retry).
pub(super) async fn settled(
    ctx: &Ctx<'_>,
    r: &Request,
    copy: &mut Option<Stored>,
) -> Result<Option<Stored>, ApiError> {
    let found = store::idempotency::find(ctx.db, &r.owner(), &r.key, Utc::now())
        .await?
        .map(Stored::from);
    copy.clone_from(&found);
    Ok(found)
}

/// A run that failed: an earlier success of the key (a single-use credential it spent, say,
/// is why this run failed), or a first run that lost its lock (Redis restart, a run past
/// the lock's TTL) and committed meanwhile, is the answer rather than this failure.
pub(super) async fn failed(
    ctx: &Ctx<'_>,
    r: &Request,
    copy: &mut Option<Stored>,
    e: ApiError,
) -> Result<Rendered, ApiError> {
    match settled(ctx, r, copy).await? {
        Some(s) => replay(ctx, r, s),
        None => Err(e),
    }
}

/// Copies `copy` for the next retry and releases the lock, in one round trip. Both are an
/// optimisation and a courtesy: a lost copy costs the next retry one database read, a lock
/// not released delays it until the lock's TTL. Neither masks the result.
pub(super) async fn release(ctx: &Ctx<'_>, r: &Request, token: &str, copy: Option<&Stored>) {
    // Embedded mode keeps the copies in a bounded in-process cache: its key-value store
    // would hold every response of the last ten minutes in memory.
    let mut beside = Vec::new();
    let mut text = None;
    let mut ttl = Duration::ZERO;
    if let Some(s) = copy {
        let left = (s.expires_at - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        ttl = CACHE_TTL.min(left);
        if !ttl.is_zero() {
            if ctx.kv.is_redis() {
                text = s.to_copy();
            } else {
                ctx.recent.insert((r.owner(), r.key.clone()), s.clone());
            }
        }
    }
    let cache_key = r.cache_key();
    if let (Some(t), Some(fp)) = (&text, &r.credential_fingerprint) {
        // Beside the lock's copy, the one the key check prefetches with the principal.
        beside.push((credential_copy_key(fp, &r.key), t.as_str()));
    }
    let copy = text.as_deref().map(|t| (cache_key.as_str(), t));
    if let Err(e) = ctx
        .kv
        .copy_and_release(&r.lock_key(), token, copy, &beside, ttl)
        .await
    {
        tracing::warn!(error = %e, "idempotency copy or lock release failed");
    }
}

/// Runs `work` while renewing the in-flight lock's lease.
pub(super) async fn leased<T>(
    ctx: &Ctx<'_>,
    r: &Request,
    token: &str,
    work: impl std::future::Future<Output = T>,
) -> T {
    let renew = async {
        let lock = r.lock_key();
        let start = tokio::time::Instant::now() + LEASE_RENEW_EVERY;
        let mut tick = tokio::time::interval_at(start, LEASE_RENEW_EVERY);
        loop {
            tick.tick().await;
            match ctx.kv.extend_if_eq(&lock, token, LOCK_LEASE).await {
                Ok(true) => {}
                Ok(false) => {
                    // Lapsed (a stall longer than the lease): a retry may run beside this
                    // one now, and the database record decides which of them stands.
                    tracing::warn!("idempotency lease lapsed while the request ran");
                    return std::future::pending::<()>().await;
                }
                Err(e) => tracing::warn!(error = %e, "renewing an idempotency lease failed"),
            }
        }
    };
    tokio::pin!(work);
    tokio::pin!(renew);
    match futures::future::select(work, renew).await {
        futures::future::Either::Left((out, _)) => out,
        futures::future::Either::Right(((), work)) => work.await,
    }
}
