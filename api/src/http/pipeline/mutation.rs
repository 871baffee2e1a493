//! The one path every mutating operation takes. A handler names its Idempotency-Key
//! parameter with the [`Idempotent`] extractor, which takes the header as the early replay
//! layer parsed it and names the operation by the request's method and path; the
//! handler checks what is its own (permission, path ids) and hands its domain work to
//! [`Idempotent::run`], which applies the scope guard on `context`, then runs the work
//! inside the idempotent transaction and records its response with it.
use poem::{Request, RequestBody};
use poem_openapi::{
    ApiExtractor, ApiExtractorType, ExtractParamOptions,
    registry::{MetaParamIn, MetaSchema, MetaSchemaRef, Registry},
};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use std::sync::Arc;

use crate::http::{
    pipeline::body::JsonBody, pipeline::common::RequestContext, pipeline::early_replay,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::{
            Principal,
            scope::{self, Acting},
        },
        operators::Operator,
        validate,
    },
    error::ApiError,
    idempotency::{self, Outcome, Presented},
    state::AppState,
    store::WriteTxn,
};

/// A mutating request's `Idempotency-Key` (declare it `#[oai(name = "Idempotency-Key")]`)
/// and the operation it keys: the method and the path as requested. `REQUIRED` is false for
/// the operations the key is optional on ([`OptionalKey`]): sent, it replays as anywhere
/// else; absent, the work runs in the same transaction with nothing kept to replay.
pub struct Idempotent<'a, const REQUIRED: bool = true> {
    state: &'a AppState,
    /// As the early replay parsed it; reported by `run`: the operation's own checks
    /// (permission, path ids) answer first.
    presented: Arc<Presented>,
    operation: String,
    ttl: Option<chrono::Duration>,
}

/// The `Idempotency-Key` of an operation that takes it optionally (operators' actions).
pub type OptionalKey<'a> = Idempotent<'a, false>;

impl<'a, const REQUIRED: bool> ApiExtractor<'a> for Idempotent<'a, REQUIRED> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::Parameter];
    // Published as what it is: a UUID, required or not. Checked here, not by the framework,
    // so a missing or malformed key is reported after the operation's own checks (see
    // `key`).
    const PARAM_IS_REQUIRED: bool = REQUIRED;

    type ParamType = String;
    type ParamRawType = ();

    fn register(_registry: &mut Registry) {}

    fn param_in() -> Option<MetaParamIn> {
        Some(MetaParamIn::Header)
    }

    // A pattern rather than `format: uuid`: generators type a uuid-format header as a UUID
    // object, and openapi-python-client then hands that object to httpx, which refuses it.
    fn param_schema_ref() -> Option<MetaSchemaRef> {
        Some(MetaSchemaRef::Inline(Box::new(MetaSchema {
            pattern: Some(validate::UUID_PATTERN.to_string()),
            min_length: Some(36),
            max_length: Some(36),
            ..MetaSchema::new("string")
        })))
    }

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        _param_opts: ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        let state = request
            .data::<AppState>()
            .ok_or_else(|| ApiError::internal("the application state is not installed"))?;
        Ok(Idempotent {
            state,
            presented: early_replay::presented(request),
            operation: idempotency::operation(
                request.method().as_str(),
                request.original_uri().path(),
            ),
            ttl: None,
        })
    }
}

impl<'a, const REQUIRED: bool> Idempotent<'a, REQUIRED> {
    /// The service's state, for work that needs more than the transaction.
    pub fn state(&self) -> &'a AppState {
        self.state
    }

    /// For an operation that keeps nothing (a read-shaped POST): the key, if sent, must be a
    /// UUID.
    pub fn check(&self) -> Result<(), ApiError> {
        self.presented.key(REQUIRED).map(drop)
    }

    /// Keeps the response for `ttl` instead of the configured replay window.
    pub fn ttl(mut self, ttl: chrono::Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Runs `work` once per key under the scope guard on the body's `context`, or replays
    /// what it answered. The body as parsed JSON is the request's fingerprint.
    pub async fn run<T, B>(
        self,
        principal: &Principal,
        body: &JsonBody<B>,
        work: impl AsyncFnOnce(&WriteTxn, Acting) -> Result<Outcome<T>, ApiError>,
    ) -> poem::Result<Reply<T>>
    where
        T: Serialize + Send,
    {
        self.run_prepared(
            principal,
            body,
            async |_| Ok(()),
            async move |txn, acting, ()| work(txn, acting).await,
        )
        .await
    }

    /// `run` with a `prepare` step that only runs when the work will (never for a replay),
    /// outside the database transaction: slow, lock-free work such as hashing a new key, or
    /// a check of where the caller acts (it gets the acting scope).
    pub async fn run_prepared<T, P, B>(
        self,
        principal: &Principal,
        body: &JsonBody<B>,
        prepare: impl AsyncFnOnce(&Acting) -> Result<P, ApiError>,
        work: impl AsyncFnOnce(&WriteTxn, Acting, P) -> Result<Outcome<T>, ApiError>,
    ) -> poem::Result<Reply<T>>
    where
        T: Serialize + Send,
    {
        let key = self.presented.key(REQUIRED)?;
        let (merchant_id, branch_id) = scope_ids(&body.json);
        let acting = scope::authorize(&self.state.db, principal, merchant_id, branch_id).await?;
        scope::same_terminal(principal, context_text(&body.json, "terminal_id"))?;
        let ttl = self.ttl;
        let json = &body.json;
        let fetched = self.presented.fetched();
        let request = |key| {
            let mut request =
                idempotency::Request::new(principal, key, self.operation, json, fetched);
            request.ttl = ttl;
            request
        };
        let scope = acting.clone();
        let rendered = idempotency::execute_maybe(
            self.state.idempotency(),
            key.map(request),
            async || prepare(&scope).await,
            async move |txn, prepared| work(txn, acting, prepared).await,
        )
        .await;
        if let Err(e) = &rendered {
            // A merchant's velocity limit refused it (a payment, a top-up): the crossing is
            // recorded, and announced once, now that the refused transaction rolled back.
            let till = crate::domain::risk::failures::Till::of(&scope);
            crate::domain::risk::limits::refused(&self.state.db, &till, e).await?;
        }
        Ok(Reply::rendered(rendered?))
    }

    /// An operator's mutation: keyed by the operator (whose keys never meet a tenant's),
    /// in one transaction; operators act above any tenant's scope. `body` is the request's
    /// JSON (`Null` for an action without a body).
    pub async fn run_as_operator<T>(
        self,
        operator: &Operator,
        body: &Value,
        work: impl AsyncFnOnce(&WriteTxn) -> Result<Outcome<T>, ApiError>,
    ) -> poem::Result<Reply<T>>
    where
        T: Serialize + Send,
    {
        self.run_as_operator_prepared(
            operator,
            body,
            async || Ok(()),
            async move |txn, ()| work(txn).await,
        )
        .await
    }

    /// `run_as_operator` with a `prepare` step outside the transaction that only runs when
    /// the work will (never for a replay).
    pub async fn run_as_operator_prepared<T, P>(
        self,
        operator: &Operator,
        body: &Value,
        prepare: impl AsyncFnOnce() -> Result<P, ApiError>,
        work: impl AsyncFnOnce(&WriteTxn, P) -> Result<Outcome<T>, ApiError>,
    ) -> poem::Result<Reply<T>>
    where
        T: Serialize + Send,
    {
        let key = self.presented.key(REQUIRED)?;
        let operation = self.operation;
        let request = |key| idempotency::Request::for_operator(operator.id, key, operation, body);
        let rendered =
            idempotency::execute_maybe(self.state.idempotency(), key.map(request), prepare, work)
                .await?;
        Ok(Reply::rendered(rendered))
    }
}

/// The body's `context` (every mutating body has one; an absent one is the empty context,
/// as the body's own type reads it).
/// The two ids the scope guard reads from `context`, taken from the body already parsed and
/// validated (a well-formed UUID where present; `""` reads as absent, as it does in
/// `RequestContext`), without building the whole context a second time.
fn scope_ids(json: &Value) -> (Uuid, Option<Uuid>) {
    let id = |field: &str| context_text(json, field).and_then(|s| Uuid::parse_str(s).ok());
    (id("merchant_id").unwrap_or_default(), id("branch_id"))
}

/// A context field's text; `""` reads as absent, as it does everywhere in a context.
fn context_text<'a>(json: &'a Value, field: &str) -> Option<&'a str> {
    json.get("context")
        .and_then(|c| c.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The scope guard on a request's `context`, for operations that do not mutate (reads and
/// read-shaped POSTs); `run` applies the same guard.
pub async fn authorize(
    state: &AppState,
    principal: &Principal,
    context: &RequestContext,
) -> Result<Acting, ApiError> {
    let ctx = context.parsed();
    let acting = scope::authorize(&state.db, principal, ctx.merchant_id, ctx.branch_id).await?;
    scope::same_terminal(principal, context.terminal_id.as_deref())?;
    Ok(acting)
}
