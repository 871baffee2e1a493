//! The one path every mutating operation takes: Idempotency-Key, the scope guard on
//! `context`, then the domain work inside the idempotent transaction. Handlers parse and
//! hand over; none of them re-implements a step.
use futures::future::BoxFuture;
use sea_orm::DatabaseTransaction;
use serde::Serialize;
use serde_json::Value;

use super::{common::RequestContext, reply::Reply};
use crate::{
    domain::credentials::{
        Principal,
        scope::{self, Acting},
    },
    error::ApiError,
    idempotency::{self, Outcome},
    state::AppState,
};

pub struct Call<'a> {
    pub state: &'a AppState,
    pub principal: &'a Principal,
    /// The `Idempotency-Key` header as sent.
    pub idempotency_key: Option<&'a str>,
    /// Method and concrete route, e.g. `POST /v1/auth/keys/{id}/revoke` with the id.
    pub operation: String,
    /// The request body as parsed JSON (for the fingerprint).
    pub body: &'a Value,
    pub context: &'a RequestContext,
    /// Replay window when it differs from the configured one.
    pub ttl: Option<chrono::Duration>,
}

pub async fn run<T, F>(call: Call<'_>, work: F) -> poem::Result<Reply<T>>
where
    T: Serialize + Send,
    F: for<'t> FnOnce(
            &'t DatabaseTransaction,
            Acting,
        ) -> BoxFuture<'t, Result<Outcome<T>, ApiError>>
        + Send,
{
    run_prepared(
        call,
        || async { Ok(()) },
        move |txn, acting, ()| work(txn, acting),
    )
    .await
}

/// `run` with a `prepare` step that only runs when the work will (never for a replay),
/// outside the database transaction.
pub async fn run_prepared<T, P, Prep, PrepFut, F>(
    call: Call<'_>,
    prepare: Prep,
    work: F,
) -> poem::Result<Reply<T>>
where
    T: Serialize + Send,
    Prep: FnOnce() -> PrepFut,
    PrepFut: std::future::Future<Output = Result<P, ApiError>>,
    F: for<'t> FnOnce(
            &'t DatabaseTransaction,
            Acting,
            P,
        ) -> BoxFuture<'t, Result<Outcome<T>, ApiError>>
        + Send,
{
    let key = idempotency::parse_key(call.idempotency_key)?;
    let acting = authorize(call.state, call.principal, call.context).await?;
    let mut request = idempotency::Request::new(call.principal, key, call.operation, call.body);
    request.ttl = call.ttl;
    let rendered = idempotency::execute_prepared(
        call.state.idempotency(),
        request,
        prepare,
        move |txn, prepared| work(txn, acting, prepared),
    )
    .await?;
    Ok(Reply::rendered(rendered))
}

/// The scope guard on a request's `context`, for operations that do not mutate (reads and
/// read-shaped POSTs); `run` applies the same guard.
pub async fn authorize(
    state: &AppState,
    principal: &Principal,
    context: &RequestContext,
) -> Result<Acting, ApiError> {
    let ctx = context.parsed();
    scope::authorize(&state.db, principal, ctx.merchant_id, ctx.branch_id).await
}
