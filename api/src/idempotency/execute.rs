//! Running the work once per key: claim, run it in one transaction, write the record with
//! the work's rows, commit, copy; or replay what an earlier run stored.
use chrono::Utc;
use serde::Serialize;
use std::time::Duration;
use tracing::Instrument;
use uuid::Uuid;

use super::{
    Claim, Ctx, Outcome, Request, Stored, claim, failed, leased, placeholder, prefetched, release,
    replay, settled,
};

use crate::{
    envelope::{self, Rendered},
    error::ApiError,
    infra::telemetry::trace,
    store::{self, WriteTxn},
};

/// Runs `work` exactly once per (integration, key), or replays what it returned.
pub async fn execute<T>(
    ctx: Ctx<'_>,
    r: Request,
    work: impl AsyncFnOnce(&WriteTxn) -> Result<Outcome<T>, ApiError>,
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

/// `execute_prepared` when the request carries a key; without one (where the key is
/// optional), the same prepare, transaction, writes and response, with nothing kept to
/// replay: a retry runs again.
pub async fn execute_maybe<T, P>(
    ctx: Ctx<'_>,
    r: Option<Request>,
    prepare: impl AsyncFnOnce() -> Result<P, ApiError>,
    work: impl AsyncFnOnce(&WriteTxn, P) -> Result<Outcome<T>, ApiError>,
) -> Result<Rendered, ApiError>
where
    T: Serialize + Send,
{
    match r {
        Some(r) => execute_prepared(ctx, r, prepare, work).await,
        None => {
            let prepared = prepare().await?;
            let txn = store::begin(ctx.db).await?;
            let outcome = work(&txn, prepared).await?;
            let rendered = envelope::ok_status_with(outcome.status, &outcome.data, &outcome.meta);
            txn.commit().await?;
            Ok(rendered)
        }
    }
}

/// Like `execute`, with a `prepare` step that runs only when the work will run (never for
/// a replay) and outside the database transaction: slow, lock-free work such as hashing a
/// new key goes there.
pub async fn execute_prepared<T, P>(
    ctx: Ctx<'_>,
    r: Request,
    prepare: impl AsyncFnOnce() -> Result<P, ApiError>,
    work: impl AsyncFnOnce(&WriteTxn, P) -> Result<Outcome<T>, ApiError>,
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
    // The work and its one transaction, as a span of the request's trace (only built when
    // spans are exported).
    let span = if trace::enabled() {
        tracing::info_span!("transaction", operation = %r.operation)
    } else {
        tracing::Span::none()
    };
    let result = leased(
        &ctx,
        &r,
        &token,
        Box::pin(run_locked(&ctx, &r, prepare, work, &mut copy).instrument(span)),
    )
    .await;
    release(&ctx, &r, &token, copy.as_ref()).await;
    result
}

pub(super) async fn run_locked<T, P>(
    ctx: &Ctx<'_>,
    r: &Request,
    prepare: impl AsyncFnOnce() -> Result<P, ApiError>,
    work: impl AsyncFnOnce(&WriteTxn, P) -> Result<Outcome<T>, ApiError>,
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
    let rendered = envelope::ok_status_with(outcome.status, &outcome.data, &outcome.meta);
    let record_id = Uuid::now_v7();
    let (stored_body, sealed) = if outcome.secrets.is_empty() {
        (utf8(rendered.body.clone()), None)
    } else {
        let mut text = utf8(rendered.body.clone());
        for (i, secret) in outcome.secrets.iter().enumerate() {
            let literal = serde_json::to_string(secret).map_err(ApiError::internal)?;
            text = text.replacen(&literal, &placeholder(i), 1);
        }
        let plain = serde_json::to_vec(&outcome.secrets).map_err(ApiError::internal)?;
        (text, Some(ctx.sealer.seal(&plain, record_id.as_bytes())))
    };
    let expires_at = now + r.ttl.unwrap_or(ctx.ttl);
    let mut writes = txn.take_deferred();
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
        body: stored_body,
        sealed,
        expires_at,
        request_digest: r.request_digest.clone(),
    });
    Ok(rendered)
}

/// The rendered body as text. serde_json writes UTF-8, so this is one check of it and no
/// copy; anything else would be stored as `String::from_utf8_lossy` makes it.
fn utf8(body: Vec<u8>) -> String {
    String::from_utf8(body).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
