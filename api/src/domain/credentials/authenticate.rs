//! Verifying a presented `x-api-key` without paying for bcrypt on every request.
//!
//! The row is found by its `key_prefix` and the raw key checked against its bcrypt hash
//! once; the resulting principal is then cached for `key_cache_ttl_secs` under the SHA-256
//! of the raw key (Redis in production, so every replica shares it). Any revoke, regenerate
//! or delete calls `invalidate`, which first plants a tombstone (so a verification already
//! in flight cannot re-fill the cache) and then deletes the entry: the key stops working at
//! once on every replica.
//!
//! A key in use never falls out of the cache: once two thirds of an entry's lifetime have
//! passed, one request re-reads the key's row by id (no bcrypt: the raw key was proven
//! against this very row, and a row's hash never changes) and renews the entry. Without
//! this, every request of a busy key waited for one bcrypt (about 250 ms at cost 12) each
//! time its entry expired.
use std::time::Duration;

use chrono::{DateTime, Utc};
use entities::{api_key as key_row, integration};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::{CredentialKind, Principal, Scope, api_key};
use crate::infra::kv::idempotency_keys;
use crate::{
    domain::platform::cells,
    error::{ApiError, ErrorCode},
    infra::kv::Kv,
    store,
};

/// A principal cached under its key's fingerprint. The name changed when principals gained
/// their permissions: a replica of the earlier version writes principals without them, which
/// this version must never read as a key's whole authority.
pub fn cache_key(fingerprint: &str) -> String {
    format!("apikey:principal:{fingerprint}")
}
fn index_key(key_id: uuid::Uuid) -> String {
    format!("apikey:index:{key_id}")
}
fn tombstone_key(key_id: uuid::Uuid) -> String {
    format!("apikey:tomb:{key_id}")
}
fn attempts_key(key_prefix: &str) -> String {
    format!("apikey:attempts:{key_prefix}")
}
fn proven_key(fingerprint: &str) -> String {
    format!("apikey:proven:{fingerprint}")
}

/// Verifications (cache misses, each a bcrypt) a key prefix may cause per window: a known
/// prefix must not buy an attacker a bcrypt per request.
pub const MAX_FAILURES: u64 = 20;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// How long a raw key that verified stays "proven": past the budget, a proven key is still
/// verified (against the database, as always), so guessing at a prefix cannot lock its
/// holder out. Being proven grants nothing by itself.
const PROVEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// Turns at verifying a key, striped by the key's fingerprint: one bcrypt per key at a time
/// on a replica. Without it, a cached principal expiring under load sent every request
/// that missed into its own bcrypt (about 250 ms of CPU each at cost 12), stalling the
/// replica for seconds and using up the prefix's verification budget, so a burst of valid
/// requests could be refused as RATE_LIMITED.
pub struct VerifyGate([tokio::sync::Mutex<()>; 64]);

impl Default for VerifyGate {
    fn default() -> Self {
        VerifyGate(std::array::from_fn(|_| tokio::sync::Mutex::new(())))
    }
}

impl VerifyGate {
    fn stripe(&self, fingerprint: &str) -> &tokio::sync::Mutex<()> {
        // The fingerprint is a hex SHA-256: its first byte is as good as any hash of it.
        let stripe = fingerprint
            .get(..2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0) as usize
            % self.0.len();
        &self.0[stripe]
    }

    async fn turn(&self, fingerprint: &str) -> tokio::sync::MutexGuard<'_, ()> {
        self.stripe(fingerprint).lock().await
    }

    /// The turn if it is free now: a renewal someone else is already doing is not waited
    /// for, the entry being renewed is still good.
    fn try_turn(&self, fingerprint: &str) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        self.stripe(fingerprint).try_lock().ok()
    }
}

/// A verified key's cache entry.
#[derive(Serialize, Deserialize)]
struct Cached {
    principal: Principal,
    /// From then on, a request renews the entry from the key's row.
    #[serde(with = "crate::infra::timestamp")]
    renew_at: DateTime<Utc>,
}

/// What the cache said about a presented key.
enum Found {
    Miss,
    /// A cached key that has expired since.
    Expired,
    Hit {
        principal: Box<Principal>,
        renew: bool,
        copy: Option<String>,
    },
}

/// What a key check found beside the principal, for the request's Idempotency-Key.
#[derive(Clone, Debug, Default)]
pub struct KeyCopy {
    /// The key's cache fingerprint (SHA-256 of the raw key): the idempotency step keeps
    /// response copies under it too, where the next check of this key fetches them.
    pub credential_fingerprint: String,
    /// The response copy kept under it for the request's Idempotency-Key, fetched in the
    /// same round trip as the principal.
    pub copy: Option<String>,
}

pub struct KeyAuth<'a> {
    pub db: &'a crate::store::Db,
    pub kv: &'a Kv,
    pub cache_ttl: Duration,
    pub gate: &'a VerifyGate,
    /// This deployment's cell: a key minted in another is refused unread.
    pub cell: Option<&'a str>,
}

impl KeyAuth<'_> {
    /// Verifies `raw`. With the request's Idempotency-Key, the response copy a retry would
    /// replay is fetched in the same round trip as the cached principal.
    pub async fn authenticate(
        &self,
        raw: &str,
        idempotency_key: Option<&str>,
    ) -> Result<(Principal, KeyCopy), ApiError> {
        let Some((key_prefix, _)) = api_key::split(raw) else {
            return Err(ApiError::invalid_api_key());
        };
        if !cells::serves(self.cell, cells::cell_of_key(raw)) {
            return Err(ApiError::invalid_api_key());
        }
        let fp = api_key::cache_fingerprint(raw);
        match self.cached(&fp, idempotency_key).await? {
            Found::Hit {
                principal,
                renew,
                copy,
            } => {
                if renew && let Some(_turn) = self.gate.try_turn(&fp) {
                    Box::pin(self.renew(&fp, &principal)).await?;
                }
                return Ok((
                    *principal,
                    KeyCopy {
                        credential_fingerprint: fp,
                        copy,
                    },
                ));
            }
            Found::Expired => return Err(ApiError::invalid_api_key()),
            Found::Miss => {}
        }
        // Boxed: bcrypt and the database look-up make a large state machine that the
        // cached path (nearly every request) should not carry.
        Box::pin(async move {
            let _turn = self.gate.turn(&fp).await;
            // Whoever held the turn may have verified this very key meanwhile.
            match self.cached(&fp, idempotency_key).await? {
                Found::Hit {
                    principal, copy, ..
                } => Ok((
                    *principal,
                    KeyCopy {
                        credential_fingerprint: fp,
                        copy,
                    },
                )),
                Found::Expired => Err(ApiError::invalid_api_key()),
                Found::Miss => {
                    let principal = self.verify_uncached(raw, key_prefix, &fp).await?;
                    Ok((
                        principal,
                        KeyCopy {
                            credential_fingerprint: fp,
                            copy: None,
                        },
                    ))
                }
            }
        })
        .await
    }

    /// The principal of `raw` if the cache vouches for it as it is: no renewal due, nothing
    /// to verify. Anything else (unknown, expired, due for renewal, Redis failing) is
    /// `None`, for `authenticate` to settle: this look-up never reads the database, runs
    /// bcrypt or fails a request.
    pub async fn cached_principal(
        &self,
        raw: &str,
        idempotency_key: Option<&str>,
    ) -> Option<(Principal, KeyCopy)> {
        api_key::split(raw)?;
        if !cells::serves(self.cell, cells::cell_of_key(raw)) {
            return None;
        }
        let fp = api_key::cache_fingerprint(raw);
        match self.cached(&fp, idempotency_key).await {
            Ok(Found::Hit {
                principal,
                renew: false,
                copy,
            }) => Some((
                *principal,
                KeyCopy {
                    credential_fingerprint: fp,
                    copy,
                },
            )),
            _ => None,
        }
    }

    /// What the cache holds for the key with this fingerprint.
    async fn cached(&self, fp: &str, idempotency_key: Option<&str>) -> Result<Found, ApiError> {
        let mut keys = vec![cache_key(fp)];
        if let Some(k) = idempotency_key {
            keys.push(idempotency_keys::credential_copy_key(fp, k));
        }
        let mut fetched = self.kv.mget(&keys).await?.into_iter();
        let cached = fetched.next().flatten();
        let prefetched = fetched.next().flatten();
        // An entry this version cannot read is a miss: the key is verified again.
        let Some(Cached {
            principal: p,
            renew_at,
        }) = cached.and_then(|c| serde_json::from_str::<Cached>(&c).ok())
        else {
            return Ok(Found::Miss);
        };
        let now = Utc::now();
        if p.expires_at.is_some_and(|t| t <= now) {
            return Ok(Found::Expired);
        }
        Ok(Found::Hit {
            principal: Box::new(p),
            renew: renew_at <= now,
            copy: prefetched,
        })
    }

    /// Renews a cached key's entry from its row. A key that may no longer be used (its
    /// integration suspended, say, by a change that did not invalidate the cache) loses
    /// its entry and this request is refused. Any other failure (database, Redis) only
    /// postpones the renewal: the entry is still good until it expires.
    async fn renew(&self, fp: &str, cached: &Principal) -> Result<(), ApiError> {
        let Some(key_id) = cached.key_id else {
            return Ok(());
        };
        let now = Utc::now();
        let renewed = match store::credentials::api_keys::active_by_id(self.db, key_id).await {
            Ok(Some((key, integration))) => match self.admit(&key, &integration, now).await {
                Ok(principal) => self.cache(fp, &principal, now).await.map(|_| ()),
                Err(e) => Err(e),
            },
            Ok(None) => Err(ApiError::invalid_api_key()),
            Err(e) => Err(e.into()),
        };
        match renewed {
            Err(e) if e.code() == ErrorCode::InvalidApiKey => {
                // Should the delete fail, the next renewal refuses the key again.
                if let Err(del) = self.kv.del(&[cache_key(fp)]).await {
                    tracing::warn!(error = %del, %key_id, "dropping a refused api key's cache entry failed");
                }
                Err(e)
            }
            Err(e) => {
                tracing::warn!(error = %e, %key_id, "renewing a cached api key failed");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// The principal of a key row that matched, if the key may be used now.
    async fn admit(
        &self,
        key: &key_row::Model,
        integration: &integration::Model,
        now: DateTime<Utc>,
    ) -> Result<Principal, ApiError> {
        // A matching key that is expired, or whose integration is not ACTIVE, is as good
        // as unknown: same code, same message.
        if key.expires_at.is_some_and(|t| t <= now)
            || integration.status != entities::integration::IntegrationStatus::Active
        {
            return Err(ApiError::invalid_api_key());
        }
        let scope = Scope::from_parts(&key.scope, key.enterprise_id, key.brand_id, key.branch_id)
            .ok_or_else(|| {
            ApiError::internal(format!("api key {} has an inconsistent scope", key.id))
        })?;
        let linked_merchants = if scope == Scope::Integration {
            store::tenancy::linked_enterprises(self.db, key.integration_id).await?
        } else {
            vec![]
        };
        Ok(Principal {
            kind: CredentialKind::ApiKey,
            key_id: Some(key.id),
            integration_id: key.integration_id,
            scope,
            is_sandbox: key.is_sandbox,
            expires_at: key.expires_at,
            permissions: crate::domain::credentials::Permissions::from_column(&key.permissions),
            cashier_id: None,
            terminal_id: None,
            linked_merchants,
            clock: None,
        })
    }

    /// Caches `principal` under the key's fingerprint for the configured lifetime (less
    /// if the key expires sooner), unless the key was invalidated meanwhile.
    async fn cache(
        &self,
        fp: &str,
        principal: &Principal,
        now: DateTime<Utc>,
    ) -> Result<bool, ApiError> {
        let (Some(key_id), ttl) = (
            principal.key_id,
            match principal.expires_at {
                Some(t) => self
                    .cache_ttl
                    .min((t - now).to_std().unwrap_or(Duration::ZERO)),
                None => self.cache_ttl,
            },
        ) else {
            return Ok(false);
        };
        if ttl.is_zero() {
            return Ok(false);
        }
        let renew_at = now + chrono::Duration::from_std(ttl * 2 / 3).map_err(ApiError::internal)?;
        let json = serde_json::to_string(&Cached {
            principal: principal.clone(),
            renew_at,
        })
        .map_err(ApiError::internal)?;
        self.kv
            .guarded_set(
                &cache_key(fp),
                &json,
                &index_key(key_id),
                &cache_key(fp),
                &tombstone_key(key_id),
                ttl,
            )
            .await
    }

    /// A cache miss: the key's row is found by its prefix and the raw key checked against
    /// its bcrypt hash, within the per-prefix attempt budget.
    async fn verify_uncached(
        &self,
        raw: &str,
        key_prefix: &str,
        fp: &str,
    ) -> Result<Principal, ApiError> {
        // Counted before hashing, so a burst cannot slip past the budget between a read and
        // an increment; past it, only a recently proven raw key is still worth a bcrypt.
        let (attempts, _) = self
            .kv
            .incr_window(&attempts_key(key_prefix), FAILURE_WINDOW)
            .await?;
        if attempts > MAX_FAILURES && self.kv.get(&proven_key(fp)).await?.is_none() {
            return Err(ApiError::rate_limited(
                crate::error::RateLimitInfo {
                    limit: MAX_FAILURES,
                    remaining: 0,
                    reset_secs: FAILURE_WINDOW.as_secs(),
                    window_secs: FAILURE_WINDOW.as_secs(),
                },
                FAILURE_WINDOW.as_secs(),
            ));
        }
        let candidates =
            store::credentials::api_keys::active_by_prefix(self.db, key_prefix).await?;
        let now = Utc::now();
        for (key, integration) in candidates {
            let raw_owned = raw.to_string();
            let hash = key.key_hash.clone();
            let matches = tokio::task::spawn_blocking(move || api_key::verify(&raw_owned, &hash))
                .await
                .map_err(ApiError::internal)?;
            if !matches {
                continue;
            }
            let principal = self.admit(&key, &integration, now).await?;
            self.kv.set_px(&proven_key(fp), "1", PROVEN_TTL).await?;
            self.cache(fp, &principal, now).await?;
            return Ok(principal);
        }
        Err(ApiError::invalid_api_key())
    }

    /// Makes a key unusable from the cache at once. Call it before changing the key's row,
    /// and fail the change if this fails.
    pub async fn invalidate(&self, key_id: uuid::Uuid) -> Result<(), ApiError> {
        // The tombstone outlives any cache entry a racing verification could still write.
        self.kv
            .set_px(
                &tombstone_key(key_id),
                "1",
                self.cache_ttl * 2 + Duration::from_secs(5),
            )
            .await?;
        let idx = index_key(key_id);
        let mut doomed = vec![idx.clone()];
        if let Some(entry) = self.kv.get(&idx).await? {
            doomed.push(entry);
        }
        self.kv.del(&doomed).await
    }
}
