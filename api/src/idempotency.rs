//! The retry contract of every mutating call.
//!
//! A mutation runs inside `execute`: the domain change, its outbox rows and the
//! idempotency record (the exact response bytes) commit in one database transaction. Keys
//! are scoped to the integration. A retry with the same key and the same request replays
//! those bytes with `meta.idempotency_replayed: true` (the only difference); the same key
//! with a different request (body, route or calling scope) is IDEMPOTENCY_KEY_REUSED. A
//! retry that arrives while the first is still running waits up to `wait` for it and
//! replays its result, or gets 409 CONFLICT if it is still running then. A failure stores
//! nothing, so a retry after a 5xx or 429 runs again unless the original committed.
//!
//! Redis holds the in-flight lock and a short-lived copy of recent responses (a replay is
//! one Redis round trip); the database record is the truth, and its unique index on
//! (integration, key) is what makes a second execution impossible.
use std::time::Duration;

use chrono::Utc;
use sea_orm::DatabaseTransaction;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{
    domain::credentials::{Principal, authenticate::response_copy_key},
    domain::validate,
    envelope::{self, Rendered},
    error::ApiError,
    infra::crypto::Sealer,
    infra::kv::{CopyOrLock, Kv},
    store::{self, writes::Writes},
};

/// The in-flight lock is a lease: it lapses this soon after its holder stops renewing it
/// (a crashed process), so a retry then runs instead of waiting out a long TTL. The
/// database record stays the guard against a second execution; the lock only keeps
/// concurrent retries from doing the work twice only to throw one away.
const LOCK_LEASE: Duration = Duration::from_secs(4);
/// How often a running request renews its lease.
const LEASE_RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long Redis keeps a copy of a recent response.
const CACHE_TTL: Duration = Duration::from_secs(600);
/// Stands in for a sealed secret inside a stored response body (records from before
/// several secrets per response were possible).
const SEALED_PLACEHOLDER: &str = "__sealed_secret__";

/// Stands in for the `i`th sealed secret, as a whole JSON string.
fn placeholder(i: usize) -> String {
    format!("\"__sealed_secret_{i}__\"")
}

/// Parses the `Idempotency-Key` header value: a UUID.
pub fn parse_key(value: Option<&str>) -> Result<String, ApiError> {
    let Some(v) = value else {
        return Err(ApiError::field(
            "header:Idempotency-Key",
            "required",
            "the Idempotency-Key header (a UUID) is required on this operation",
        ));
    };
    let mut errs = validate::Errors::default();
    match validate::uuid(&mut errs, "header:Idempotency-Key", v.trim()) {
        Some(u) => Ok(u.to_string()),
        None => Err(ApiError::validation(errs.0)),
    }
}

/// The operation a key is used for: the method and the path as requested, its ids
/// spelled the canonical way (lower case), so a retry that writes an id in capitals is the
/// same request, as it is to the operation itself.
pub fn operation(method: &str, path: &str) -> String {
    let mut out = String::with_capacity(method.len() + 1 + path.len());
    out.push_str(method);
    out.push(' ');
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        if segment.len() == 36 && Uuid::parse_str(segment).is_ok() {
            out.push_str(&segment.to_ascii_lowercase());
        } else {
            out.push_str(segment);
        }
    }
    out
}

/// What identifies "the same request": the operation (method and route), the calling
/// credential's scope, and the body with JSON object keys in sorted order and the
/// transport-only meta fields (`sent_at`, `partner_request_id`) left out, since a faithful
/// retry may legitimately change them.
pub fn fingerprint(operation: &str, scope: &str, body: &Value) -> String {
    let mut h = Sha256::new();
    h.update(operation.as_bytes());
    h.update(b"\n");
    h.update(scope.as_bytes());
    h.update(b"\n");
    write_canonical(body, &mut h, true);
    crate::infra::crypto::hex(&h.finalize())
}

/// Canonical JSON (keys sorted, compact) written straight into the digest, without
/// `meta.sent_at` and the correlation ids `meta.partner_request_id` and
/// `meta.decision_trace_id`, which may differ between retries of one request. The same bytes as serialising the trimmed value, so stored fingerprints keep
/// matching.
fn write_canonical(v: &Value, h: &mut Sha256, top: bool) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                write_json(k, h);
                h.update(b":");
                match &m[k] {
                    Value::Object(meta) if top && k == "meta" => {
                        let trimmed: serde_json::Map<String, Value> = meta
                            .iter()
                            .filter(|(f, _)| {
                                !matches!(
                                    f.as_str(),
                                    "sent_at" | "partner_request_id" | "decision_trace_id"
                                )
                            })
                            .map(|(f, x)| (f.clone(), x.clone()))
                            .collect();
                        write_canonical(&Value::Object(trimmed), h, false);
                    }
                    x => write_canonical(x, h, false),
                }
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(a) => {
            h.update(b"[");
            for x in a {
                write_canonical(x, h, false);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => write_json(other, h),
    }
}

fn write_json<T: Serialize + ?Sized>(v: &T, h: &mut Sha256) {
    struct Digest<'a>(&'a mut Sha256);
    impl std::io::Write for Digest<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Serialising a string or a number into a digest cannot fail.
    let _ = serde_json::to_writer(Digest(h), v);
}

/// The exact request: the calling scope, the operation as sent (method and path) and the
/// body's bytes. Equal digests are the same request; a faithful retry may still differ
/// in its bytes (key order, a new `meta.sent_at`), which `fingerprint` then decides.
pub fn request_digest(scope: &str, operation: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(scope.as_bytes());
    h.update(b"\n");
    h.update(operation.as_bytes());
    h.update(b"\n");
    h.update(body);
    crate::infra::crypto::hex(&h.finalize())
}

/// The result of a mutation's domain work.
pub struct Outcome<T> {
    pub data: T,
    /// Secrets the response shows (a new raw key, a QR nonce), each a whole JSON string
    /// value of the response. They are stored sealed, never in plaintext, and put back into
    /// the replayed bytes.
    pub secrets: Vec<String>,
    /// Extra response meta (`data_completeness_score`).
    pub meta: envelope::MetaExtra,
    /// Writes the work held back; they go to the database with the idempotency record.
    pub writes: Writes,
}

impl<T> Outcome<T> {
    pub fn new(data: T) -> Self {
        Outcome {
            data,
            secrets: Vec::new(),
            meta: envelope::MetaExtra::default(),
            writes: Writes::default(),
        }
    }

    pub fn with_secret(mut self, secret: String) -> Self {
        self.secrets.push(secret);
        self
    }
}

pub struct Request {
    pub integration_id: Uuid,
    pub key: String,
    /// Method and route with its path parameters (`POST /v1/auth/keys/{id}/revoke`).
    pub operation: String,
    pub fingerprint: String,
    /// Replay window of this operation when it differs from the default (a terminal token
    /// is replayed only while it is valid).
    pub ttl: Option<chrono::Duration>,
    /// The presenting API key's fingerprint: response copies are also kept under it.
    pub credential_fingerprint: Option<String>,
    /// A response copy fetched together with the principal.
    pub prefetched: Option<String>,
    /// See `Principal::request_digest`.
    pub request_digest: Option<String>,
}

impl Request {
    /// The request of `principal` under `key` for `operation` with this body.
    pub fn new(principal: &Principal, key: String, operation: String, body: &Value) -> Self {
        Request {
            integration_id: principal.integration_id,
            fingerprint: fingerprint(&operation, &principal.scope_fingerprint(), body),
            key,
            operation,
            ttl: None,
            credential_fingerprint: principal.credential_fingerprint.clone(),
            prefetched: principal.prefetched_response.clone(),
            request_digest: principal.request_digest.clone(),
        }
    }

    /// The request of an operator (whose keys are namespaced by the operator's id, which
    /// never equals an integration's).
    pub fn for_operator(operator_id: Uuid, key: String, operation: String, body: &Value) -> Self {
        Request {
            integration_id: operator_id,
            fingerprint: fingerprint(&operation, &format!("operator:{operator_id}"), body),
            key,
            operation,
            ttl: None,
            credential_fingerprint: None,
            prefetched: None,
            request_digest: None,
        }
    }

    fn owner(&self) -> String {
        self.integration_id.to_string()
    }

    fn lock_key(&self) -> String {
        format!("idem:lock:{}:{}", self.integration_id, self.key)
    }

    fn cache_key(&self) -> String {
        format!("idem:resp:{}:{}", self.integration_id, self.key)
    }
}

pub struct Ctx<'a> {
    pub db: &'a sea_orm::DatabaseConnection,
    pub kv: &'a Kv,
    pub sealer: &'a Sealer,
    /// How long a stored response can be replayed.
    pub ttl: chrono::Duration,
    /// How long a retry waits for a first request that is still running.
    pub wait: Duration,
    /// Embedded mode's copies of recent responses (production keeps them in Redis).
    pub recent: &'a RecentResponses,
}

/// Recent stored responses by (owner, Idempotency-Key), bounded so that a busy embedded
/// service does not hold every response of the replay window in memory.
pub type RecentResponses = crate::infra::cache::TtlCache<(String, String), Stored>;

pub fn recent_responses() -> RecentResponses {
    crate::infra::cache::TtlCache::new(CACHE_TTL, 4096)
}

/// A stored response, from the database or its Redis copy.
#[derive(Clone, Serialize, serde::Deserialize)]
pub struct Stored {
    id: Uuid,
    operation: String,
    fingerprint: String,
    status: u16,
    /// Follows the other fields' JSON line in a copy, as it is: unescaped, it costs a
    /// replay no parsing.
    #[serde(skip)]
    body: String,
    sealed: Option<String>,
    #[serde(with = "crate::infra::timestamp")]
    expires_at: chrono::DateTime<Utc>,
    /// The digest of the request that stored this response (see `request_digest`); only
    /// copies made by that request carry it, the database record does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_digest: Option<String>,
}

impl Stored {
    /// The Redis copy: the fields other than the body as one JSON line, then the body.
    fn to_copy(&self) -> Option<String> {
        let mut text = serde_json::to_string(self).ok()?;
        text.push('\n');
        text.push_str(&self.body);
        Some(text)
    }

    fn from_copy(text: &str) -> Option<Stored> {
        let (head, body) = text.split_once('\n')?;
        let mut s: Stored = serde_json::from_str(head).ok()?;
        s.body = body.to_string();
        Some(s)
    }
}

impl From<entities::idempotency_record::Model> for Stored {
    fn from(m: entities::idempotency_record::Model) -> Self {
        Stored {
            id: m.id,
            operation: m.operation,
            fingerprint: m.request_fingerprint,
            status: u16::try_from(m.status_code).unwrap_or(200),
            body: m.response_body,
            sealed: m.sealed_secret,
            expires_at: m.expires_at,
            request_digest: None,
        }
    }
}

/// A response copy fetched together with the principal (an API key's own round trip).
fn prefetched(r: &Request) -> Option<Stored> {
    r.prefetched
        .as_deref()
        .and_then(Stored::from_copy)
        .filter(|s| s.expires_at > Utc::now())
}

/// What a caller found when it came for the key.
enum Claim {
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
async fn claim(ctx: &Ctx<'_>, r: &Request, token: &str) -> Result<Claim, ApiError> {
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
async fn settled(
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
async fn failed(
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
async fn release(ctx: &Ctx<'_>, r: &Request, token: &str, copy: Option<&Stored>) {
    // Embedded mode keeps the copies in a bounded in-process cache: its key-value store
    // would hold every response of the last ten minutes in memory.
    let mut copies = Vec::new();
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
    if let Some(t) = &text {
        copies.push((r.cache_key(), t.as_str()));
        if let Some(fp) = &r.credential_fingerprint {
            copies.push((response_copy_key(fp, &r.key), t.as_str()));
        }
    }
    if let Err(e) = ctx
        .kv
        .copy_and_release(&copies, ttl, &r.lock_key(), token)
        .await
    {
        tracing::warn!(error = %e, "idempotency copy or lock release failed");
    }
}

fn replay(ctx: &Ctx<'_>, r: &Request, s: Stored) -> Result<Rendered, ApiError> {
    if s.fingerprint != r.fingerprint || s.operation != r.operation {
        return Err(ApiError::idempotency_key_reused());
    }
    let mut text = s.body;
    if let Some(sealed) = s.sealed {
        let opened = ctx
            .sealer
            .open(&sealed, s.id.as_bytes())
            .map_err(ApiError::internal)?;
        match serde_json::from_slice::<Vec<String>>(&opened) {
            Ok(secrets) => {
                for (i, secret) in secrets.iter().enumerate() {
                    let literal = serde_json::to_string(secret).map_err(ApiError::internal)?;
                    text = text.replacen(&placeholder(i), &literal, 1);
                }
            }
            Err(_) => {
                let secret = String::from_utf8(opened).map_err(ApiError::internal)?;
                text = text.replacen(SEALED_PLACEHOLDER, &secret, 1);
            }
        }
    }
    Ok(Rendered {
        status: s.status,
        body: envelope::mark_replayed(text.as_bytes()),
        replayed: true,
        retry_after: None,
        rate: None,
    })
}

/// A retry answered before its body is parsed into the operation's type: the stored
/// response if this API key's principal came with a copy of it (or, embedded, the
/// process holds one) and the copy is of this very request: the same operation, scope
/// and body. The body is the same if its bytes are (the principal's `request_digest`
/// equals the copy's), or else if `execute` would find it so (`fingerprint`); `body` is
/// parsed only for that second comparison, so neither a first request nor a retry of
/// the same bytes parses it here.
///
/// Anything else is `None`, and the request takes the full path: `execute` answers a
/// different body with IDEMPOTENCY_KEY_REUSED, waits for a first request still running,
/// or runs the work. A stored response is the answer to its request for as long as it
/// lives, so it is replayed without checking the body again: a field that has gone stale
/// since (an `expires_at` now in the past) does not turn a retry into a validation error.
pub fn replay_early(
    ctx: &Ctx<'_>,
    principal: &Principal,
    key: &str,
    operation: &str,
    body: impl FnOnce() -> Option<Value>,
) -> Option<Rendered> {
    let now = Utc::now();
    let stored = match principal.prefetched_response.as_deref() {
        Some(copy) => Stored::from_copy(copy),
        None if !ctx.kv.is_redis() => ctx
            .recent
            .get(&(principal.integration_id.to_string(), key.to_string())),
        None => None,
    }
    .filter(|s| s.expires_at > now && s.operation == operation)?;
    let same_bytes =
        stored.request_digest.is_some() && stored.request_digest == principal.request_digest;
    let r = Request {
        integration_id: principal.integration_id,
        key: key.to_string(),
        operation: operation.to_string(),
        fingerprint: if same_bytes {
            stored.fingerprint.clone()
        } else {
            fingerprint(operation, &principal.scope_fingerprint(), &body()?)
        },
        ttl: None,
        credential_fingerprint: principal.credential_fingerprint.clone(),
        prefetched: None,
        request_digest: None,
    };
    // A different body is IDEMPOTENCY_KEY_REUSED: `execute` says so, on the full path.
    replay(ctx, &r, stored).ok()
}

/// Runs `work` exactly once per (integration, key), or replays what it returned.
pub async fn execute<T>(
    ctx: Ctx<'_>,
    r: Request,
    work: impl AsyncFnOnce(&DatabaseTransaction) -> Result<Outcome<T>, ApiError>,
) -> Result<Rendered, ApiError>
where
    T: Serialize + Send,
{
    execute_prepared(
        ctx,
        r,
        async || Ok(()),
        async move |txn, ()| work(txn).await,
    )
    .await
}

/// Like `execute`, with a `prepare` step that runs only when the work will run (never for
/// a replay) and outside the database transaction: slow, lock-free work such as hashing a
/// new key goes there.
pub async fn execute_prepared<T, P>(
    ctx: Ctx<'_>,
    r: Request,
    prepare: impl AsyncFnOnce() -> Result<P, ApiError>,
    work: impl AsyncFnOnce(&DatabaseTransaction, P) -> Result<Outcome<T>, ApiError>,
) -> Result<Rendered, ApiError>
where
    T: Serialize + Send,
{
    if let Some(s) = prefetched(&r) {
        return replay(&ctx, &r, s);
    }
    let token = Uuid::new_v4().to_string();
    let deadline = tokio::time::Instant::now() + ctx.wait;
    // Another request holds the key: wait for its outcome, bounded.
    loop {
        match claim(&ctx, &r, &token).await? {
            Claim::Copy(s) => return replay(&ctx, &r, s),
            Claim::Locked => break,
            Claim::Held if tokio::time::Instant::now() >= deadline => {
                return Err(ApiError::conflict(
                    "A request with this Idempotency-Key is still in progress; retry with the same key.",
                ));
            }
            Claim::Held => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
    // Boxed: the work's state machine is large, and a replay (the hot path of a retry)
    // should not carry and move it.
    let mut copy = None;
    let result = leased(
        &ctx,
        &r,
        &token,
        Box::pin(run_locked(&ctx, &r, prepare, work, &mut copy)),
    )
    .await;
    release(&ctx, &r, &token, copy.as_ref()).await;
    result
}

/// Runs `work` while renewing the in-flight lock's lease.
async fn leased<T>(
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

async fn run_locked<T, P>(
    ctx: &Ctx<'_>,
    r: &Request,
    prepare: impl AsyncFnOnce() -> Result<P, ApiError>,
    work: impl AsyncFnOnce(&DatabaseTransaction, P) -> Result<Outcome<T>, ApiError>,
    // Set to the stored response the next retry should find copied.
    copy: &mut Option<Stored>,
) -> Result<Rendered, ApiError>
where
    T: Serialize + Send,
{
    let now = Utc::now();
    let owner = r.owner();
    // No look-up first: the database settles what the Redis copy could not (a success older
    // than the copy's lifetime, or one that committed between our look-up and our lock) at
    // the end. The work then either fails (a single-use credential already spent) or
    // reaches the record insert, which the live record refuses; either way the earlier
    // response is replayed and nothing of this run commits. A retry costs the work's reads;
    // every first request, the common case, saves a round trip.
    let prepared = match prepare().await {
        Ok(p) => p,
        Err(e) => return failed(ctx, r, copy, e).await,
    };
    let txn = store::begin(ctx.db).await?;
    let outcome = match work(&txn, prepared).await {
        Ok(o) => o,
        Err(e) => {
            drop(txn);
            return failed(ctx, r, copy, e).await;
        }
    };
    let rendered = envelope::ok_with(&outcome.data, &outcome.meta);
    let record_id = Uuid::now_v7();
    let (stored_body, sealed) = if outcome.secrets.is_empty() {
        (rendered.body.clone(), None)
    } else {
        let mut text = String::from_utf8_lossy(&rendered.body).into_owned();
        for (i, secret) in outcome.secrets.iter().enumerate() {
            let literal = serde_json::to_string(secret).map_err(ApiError::internal)?;
            text = text.replacen(&literal, &placeholder(i), 1);
        }
        let plain = serde_json::to_vec(&outcome.secrets).map_err(ApiError::internal)?;
        (
            text.into_bytes(),
            Some(ctx.sealer.seal(&plain, record_id.as_bytes())),
        )
    };
    let expires_at = now + r.ttl.unwrap_or(ctx.ttl);
    let mut writes = outcome.writes;
    let record = store::idempotency::defer_insert(
        &mut writes,
        store::idempotency::NewRecord {
            id: record_id,
            owner: &owner,
            key: &r.key,
            operation: &r.operation,
            fingerprint: &r.fingerprint,
            status_code: rendered.status,
            response_body: &stored_body,
            sealed_secret: sealed.clone(),
            created_at: now,
            expires_at,
        },
    );
    let written = match writes.flush(&txn).await {
        Ok(counts) => counts.of(record) == 1,
        // The unique index, where the upsert's own conflict target did not catch it.
        Err(e) if store::is_unique_violation(&e) => false,
        Err(e) => {
            drop(txn);
            return failed(ctx, r, copy, e.into()).await;
        }
    };
    if !written {
        // A live record holds the key: an earlier success, or another process that won the
        // race past an expired lock. Its work stands, ours rolls back, and the caller gets
        // its response.
        drop(txn);
        return match settled(ctx, r, copy).await? {
            Some(s) => replay(ctx, r, s),
            None => Err(ApiError::conflict(
                "Concurrent request with this Idempotency-Key; retry.",
            )),
        };
    }
    txn.commit().await?;
    *copy = Some(Stored {
        id: record_id,
        operation: r.operation.clone(),
        fingerprint: r.fingerprint.clone(),
        status: rendered.status,
        body: String::from_utf8_lossy(&stored_body).into_owned(),
        sealed,
        expires_at,
        request_digest: r.request_digest.clone(),
    });
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprints_ignore_key_order_and_transport_meta() {
        let a = json!({"meta": {"api_version": "2026-06-01", "sent_at": "2026-01-01T00:00:00Z"}, "x": 1, "y": [1, {"b": 2, "a": 1}]});
        let b = json!({"y": [1, {"a": 1, "b": 2}], "x": 1, "meta": {"sent_at": "2026-02-02T00:00:00Z", "api_version": "2026-06-01"}});
        assert_eq!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/x", "s", &b)
        );
        let c = json!({"meta": {"api_version": "2026-06-01"}, "x": 2, "y": [1, {"a": 1, "b": 2}]});
        assert_ne!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/x", "s", &c)
        );
        assert_ne!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/z", "s", &a)
        );
        assert_ne!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/x", "t", &a)
        );
    }

    /// The digest input as records stored before the streaming writer were fingerprinted.
    fn stored_form(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for k in keys {
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    stored_form(&m[k], out);
                    out.push(',');
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for x in a {
                    stored_form(x, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    #[test]
    fn fingerprints_of_stored_records_still_match() {
        let body = json!({"meta": {"api_version": "2026-06-01", "partner_request_id": "p", "sent_at": "t"},
            "s": "a\"b\u{e9}\n", "n": -1.5, "z": null, "t": true, "l": [{"k": "v"}, [], {}],
            "nested": {"meta": {"sent_at": "kept below the top level"}}});
        let mut trimmed = body.clone();
        let meta = trimmed["meta"].as_object_mut().unwrap();
        meta.remove("sent_at");
        meta.remove("partner_request_id");
        let mut form = String::new();
        stored_form(&trimmed, &mut form);
        let mut h = Sha256::new();
        h.update(b"POST /v1/x\ns\n");
        h.update(form.as_bytes());
        assert_eq!(
            fingerprint("POST /v1/x", "s", &body),
            hex::encode(h.finalize())
        );
    }

    #[test]
    fn a_copy_gives_back_the_stored_response_exactly() {
        let s = Stored {
            id: Uuid::now_v7(),
            operation: "POST /v1/payments".into(),
            fingerprint: "f".into(),
            status: 402,
            body: "{\"a\":\"line\\nbreak\"}\n\nand raw newlines".into(),
            sealed: Some("v1.x".into()),
            expires_at: Utc::now(),
            request_digest: Some("d".into()),
        };
        let back = Stored::from_copy(&s.to_copy().unwrap()).unwrap();
        assert_eq!(
            (
                back.id,
                back.status,
                &back.body,
                &back.sealed,
                back.expires_at,
                &back.request_digest
            ),
            (
                s.id,
                s.status,
                &s.body,
                &s.sealed,
                s.expires_at,
                &s.request_digest
            )
        );
        assert!(Stored::from_copy("{\"not\": \"a copy\"}").is_none());
    }

    #[test]
    fn an_operation_is_the_method_and_path_with_ids_in_canonical_case() {
        assert_eq!(
            operation(
                "POST",
                "/v1/payments/0191C1C0-7F3E-7A44-B1A6-1F2D3C4B5A69/refund"
            ),
            "POST /v1/payments/0191c1c0-7f3e-7a44-b1a6-1f2d3c4b5a69/refund"
        );
        // Only ids: other segments (a SKU code) keep their spelling.
        assert_eq!(
            operation("POST", "/v1/topup/sku/Gift-CARD-50"),
            "POST /v1/topup/sku/Gift-CARD-50"
        );
    }

    #[test]
    fn the_key_must_be_a_uuid() {
        assert!(parse_key(Some("0191c1c0-7f3e-7a44-b1a6-1f2d3c4b5a69")).is_ok());
        for bad in [
            None,
            Some(""),
            Some("abc"),
            Some("0191c1c07f3e7a44b1a61f2d3c4b5a69"),
        ] {
            let e = parse_key(bad).unwrap_err();
            assert_eq!(e.code(), crate::error::ErrorCode::ValidationError);
        }
    }
}
