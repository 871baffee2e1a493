//! The retry contract of every mutating call.
//!
//! A mutation runs inside `execute`: the domain change, its outbox rows and the
//! idempotency record (the exact response bytes) commit in one database transaction. A
//! retry with the same key and the same request replays those bytes with
//! `meta.idempotency_replayed: true`; the same key with a different request is
//! IDEMPOTENCY_KEY_REUSED; a retry that arrives while the first is still running gets
//! CONFLICT (retry later with the same key). The Redis lock only keeps concurrent retries
//! from doing the work twice; the unique index on (owner, key) is what guarantees it.
use std::time::Duration;

use chrono::Utc;
use futures::future::BoxFuture;
use sea_orm::DatabaseTransaction;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{
    crypto::Sealer,
    domain::validate,
    envelope::{self, Rendered},
    error::ApiError,
    kv::Kv,
    store,
};

/// How long a stored response can be replayed.
pub const TTL: chrono::Duration = chrono::Duration::hours(24);
const LOCK_TTL: Duration = Duration::from_secs(60);
/// Stands in for a sealed secret inside a stored response body.
const SEALED_PLACEHOLDER: &str = "__sealed_secret__";

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

/// What identifies "the same request": the operation and the body, with JSON object keys
/// in sorted order and the transport-only meta fields (`sent_at`, `partner_request_id`)
/// left out, since a faithful retry may legitimately change them.
pub fn fingerprint(operation: &str, body: &Value) -> String {
    let mut v = body.clone();
    if let Some(meta) = v.get_mut("meta").and_then(Value::as_object_mut) {
        meta.remove("sent_at");
        meta.remove("partner_request_id");
    }
    let mut h = Sha256::new();
    h.update(operation.as_bytes());
    h.update(b"\n");
    write_canonical(&v, &mut h);
    hex::encode(h.finalize())
}

fn write_canonical(v: &Value, h: &mut Sha256) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                h.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                h.update(b":");
                write_canonical(&m[k], h);
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(a) => {
            h.update(b"[");
            for x in a {
                write_canonical(x, h);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => h.update(other.to_string().as_bytes()),
    }
}

/// The result of a mutation's domain work.
pub struct Outcome<T> {
    pub data: T,
    /// A secret the response shows once (a new raw key). It is stored sealed, never in
    /// plaintext, and put back into the replayed bytes.
    pub secret: Option<String>,
}

impl<T> Outcome<T> {
    pub fn new(data: T) -> Self {
        Outcome { data, secret: None }
    }
}

pub struct Request<'a> {
    pub owner: &'a str,
    pub key: &'a str,
    /// `POST /v1/auth/keys` and the like: a key is bound to one operation.
    pub operation: &'a str,
    pub fingerprint: &'a str,
}

pub struct Ctx<'a> {
    pub db: &'a sea_orm::DatabaseConnection,
    pub kv: &'a Kv,
    pub sealer: &'a Sealer,
}

fn lock_key(r: &Request<'_>) -> String {
    format!("idem:lock:{}:{}", r.owner, r.key)
}

fn replay(
    ctx: &Ctx<'_>,
    r: &Request<'_>,
    rec: entities::idempotency_record::Model,
) -> Result<Rendered, ApiError> {
    if rec.request_fingerprint != r.fingerprint || rec.operation != r.operation {
        return Err(ApiError::idempotency_key_reused());
    }
    let mut body = rec.response_body.into_bytes();
    if let Some(sealed) = rec.sealed_secret {
        let secret = ctx
            .sealer
            .open(&sealed, rec.id.as_bytes())
            .map_err(ApiError::internal)?;
        let secret = String::from_utf8(secret).map_err(ApiError::internal)?;
        body = String::from_utf8_lossy(&body)
            .replacen(SEALED_PLACEHOLDER, &secret, 1)
            .into_bytes();
    }
    Ok(Rendered {
        status: u16::try_from(rec.status_code).unwrap_or(200),
        body: envelope::mark_replayed(&body),
        replayed: true,
        retry_after: None,
    })
}

/// Runs `work` exactly once per (owner, key), or replays what it returned the first time.
pub async fn execute<T, F>(ctx: Ctx<'_>, r: Request<'_>, work: F) -> Result<Rendered, ApiError>
where
    T: Serialize + Send,
    F: for<'t> FnOnce(&'t DatabaseTransaction) -> BoxFuture<'t, Result<Outcome<T>, ApiError>>,
{
    let now = Utc::now();
    if let Some(rec) = store::idempotency::find(ctx.db, r.owner, r.key, now).await? {
        return replay(&ctx, &r, rec);
    }
    let token = Uuid::new_v4().to_string();
    if !ctx.kv.set_nx_px(&lock_key(&r), &token, LOCK_TTL).await? {
        return Err(ApiError::conflict(
            "A request with this Idempotency-Key is still in progress; retry with the same key.",
        ));
    }
    let result = run_locked(&ctx, &r, work).await;
    // A failed release only delays the next retry until the lock's TTL; never mask the result.
    if let Err(e) = ctx.kv.del_if_eq(&lock_key(&r), &token).await {
        tracing::warn!(error = %e, "idempotency lock release failed");
    }
    result
}

async fn run_locked<T, F>(ctx: &Ctx<'_>, r: &Request<'_>, work: F) -> Result<Rendered, ApiError>
where
    T: Serialize + Send,
    F: for<'t> FnOnce(&'t DatabaseTransaction) -> BoxFuture<'t, Result<Outcome<T>, ApiError>>,
{
    let now = Utc::now();
    // The holder before us may have committed between our look-up and our lock.
    if let Some(rec) = store::idempotency::find(ctx.db, r.owner, r.key, now).await? {
        return replay(ctx, r, rec);
    }
    store::idempotency::delete_expired(ctx.db, r.owner, r.key, now).await?;

    let txn = store::begin(ctx.db).await?;
    let outcome = work(&txn).await?;
    let rendered = envelope::ok(&outcome.data);
    let record_id = Uuid::now_v7();
    let (stored_body, sealed) = match &outcome.secret {
        Some(secret) => {
            let text = String::from_utf8_lossy(&rendered.body).replacen(
                secret.as_str(),
                SEALED_PLACEHOLDER,
                1,
            );
            (
                text.into_bytes(),
                Some(ctx.sealer.seal(secret.as_bytes(), record_id.as_bytes())),
            )
        }
        None => (rendered.body.clone(), None),
    };
    let inserted = store::idempotency::insert(
        &txn,
        store::idempotency::NewRecord {
            id: record_id,
            owner: r.owner,
            key: r.key,
            operation: r.operation,
            fingerprint: r.fingerprint,
            status_code: rendered.status,
            response_body: &stored_body,
            sealed_secret: sealed,
            created_at: now,
            expires_at: now + TTL,
        },
    )
    .await;
    match inserted {
        Ok(()) => {}
        Err(e) if store::is_unique_violation(&e) => {
            // Another process won the race past an expired lock: its work stands, ours
            // rolls back, and the caller gets its response.
            drop(txn);
            return match store::idempotency::find(ctx.db, r.owner, r.key, Utc::now()).await? {
                Some(rec) => replay(ctx, r, rec),
                None => Err(ApiError::conflict(
                    "Concurrent request with this Idempotency-Key; retry.",
                )),
            };
        }
        Err(e) => return Err(e.into()),
    }
    txn.commit().await?;
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
        assert_eq!(fingerprint("POST /v1/x", &a), fingerprint("POST /v1/x", &b));
        let c = json!({"meta": {"api_version": "2026-06-01"}, "x": 2, "y": [1, {"a": 1, "b": 2}]});
        assert_ne!(fingerprint("POST /v1/x", &a), fingerprint("POST /v1/x", &c));
        assert_ne!(fingerprint("POST /v1/x", &a), fingerprint("POST /v1/z", &a));
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
