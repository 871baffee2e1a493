//! Replaying a stored response byte for byte, its sealed secrets put back; and the early
//! replay that answers a retry before its body is parsed.
use chrono::Utc;
use serde_json::Value;

use super::{Ctx, Fetched, Request, Stored, fingerprint};

use crate::{
    domain::credentials::Principal,
    envelope::{self, Rendered},
    error::ApiError,
};

/// Stands in for a sealed secret inside a stored response body (records from before
/// several secrets per response were possible).
pub(super) const SEALED_PLACEHOLDER: &str = "__sealed_secret__";

/// Stands in for the `i`th sealed secret, as a whole JSON string.
pub(super) fn placeholder(i: usize) -> String {
    format!("\"__sealed_secret_{i}__\"")
}

pub(super) fn replay(ctx: &Ctx<'_>, r: &Request, s: Stored) -> Result<Rendered, ApiError> {
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
/// and body. The body is the same if its bytes are (the `request_digest` the early replay
/// computed equals the copy's), or else if `execute` would find it so (`fingerprint`); `body` is
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
    fetched: &Fetched,
    key: &str,
    operation: &str,
    body: impl FnOnce() -> Option<Value>,
) -> Option<Rendered> {
    let now = Utc::now();
    let stored = match fetched.copy.as_deref() {
        Some(copy) => Stored::from_copy(copy),
        None if !ctx.kv.is_redis() => ctx
            .recent
            .get(&(principal.integration_id.to_string(), key.to_string())),
        None => None,
    }
    .filter(|s| s.expires_at > now && s.operation == operation)?;
    let same_bytes =
        stored.request_digest.is_some() && stored.request_digest == fetched.request_digest;
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
        credential_fingerprint: fetched.credential_fingerprint.clone(),
        prefetched: None,
        request_digest: None,
    };
    // A different body is IDEMPOTENCY_KEY_REUSED: `execute` says so, on the full path.
    replay(ctx, &r, stored).ok()
}
