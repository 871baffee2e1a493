//! The outer layers every request passes: request id and log span, body buffering with a
//! size limit, panic capture, and conversion of any error into the envelope.
use std::{sync::Arc, time::Instant};

use poem::{
    Endpoint, IntoResponse, Middleware, Request, Response,
    http::HeaderValue,
    middleware::{CatchPanic, PanicHandler},
};
use tracing::Instrument;

use crate::{
    envelope,
    error::ApiError,
    infra::{
        current_request,
        telemetry::{metrics as m, trace},
    },
};

use crate::http::{openapi::route_table::RouteTable, pipeline::errors};

/// Request id (accepting a caller's `X-Request-Id` only when it is short and printable),
/// tracing span, error → envelope, the `X-Request-Id` header on every response, and the
/// request metrics, labelled by the route template the path matched in `routes`.
pub struct PerRequest(pub Arc<RouteTable>);

impl<E: Endpoint> Middleware<E> for PerRequest {
    type Output = PerRequestEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        PerRequestEp {
            inner: ep,
            routes: self.0.clone(),
        }
    }
}

pub struct PerRequestEp<E> {
    inner: E,
    routes: Arc<RouteTable>,
}

fn usable_request_id(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    (!s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    .then(|| s.to_string())
}

/// The `route` label: the template the path routes to. The console's pages share one label,
/// and a path that routes nowhere is `unmatched`, so a scan of random paths cannot grow the
/// number of series.
fn route_label(routes: &RouteTable, path: &str) -> String {
    match routes.template(path) {
        Some(t) => t.to_string(),
        None if path == "/ops" || path.starts_with("/ops/") => "/ops".into(),
        None => "unmatched".into(),
    }
}

/// Counts a request in flight for as long as it is held, however its future ends.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        metrics::gauge!(m::HTTP_IN_FLIGHT).increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!(m::HTTP_IN_FLIGHT).decrement(1.0);
    }
}

impl<E: Endpoint> Endpoint for PerRequestEp<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let _in_flight = InFlight::enter();
        let started = Instant::now();
        let id = req
            .headers()
            .get("x-request-id")
            .and_then(usable_request_id)
            .unwrap_or_else(current_request::new_request_id);
        let method = req.method().as_str().to_string();
        let route = route_label(&self.routes, req.uri().path());
        let span = tracing::info_span!(
            "request",
            request_id = %id,
            method = %method,
            path = %req.uri().path(),
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
        );
        // The caller's trace, if it sent one: the request's span continues it, and the work
        // the request leaves behind (outbox rows, jobs, webhooks) carries it on.
        let incoming = req
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok());
        trace::continue_trace(&span, incoming);
        // Named for the trace only: the log lines keep their fields.
        if trace::enabled() {
            span.record("otel.name", format!("{method} {route}"));
            span.record("otel.kind", "server");
        }
        let traceparent = trace::traceparent(&span, incoming);
        let origin = current_request::Origin {
            request_id: id.clone(),
            traceparent: traceparent.clone(),
        };
        let mut resp = current_request::within(origin, async move {
            match self.inner.call(req).await {
                Ok(r) => r.into_response(),
                Err(e) => {
                    let api = errors::from_poem(&e);
                    poem::error::ResponseError::as_response(&api)
                }
            }
        })
        .instrument(span.clone())
        .await;
        if let Some(v) = traceparent.and_then(|tp| HeaderValue::from_str(&tp).ok()) {
            resp.headers_mut().insert("traceparent", v);
        }
        if let Ok(v) = HeaderValue::from_str(&id) {
            resp.headers_mut().insert("x-request-id", v);
        }
        let status = resp.status().as_u16();
        let elapsed = started.elapsed();
        span.in_scope(|| {
            tracing::info!(status, elapsed_ms = elapsed.as_millis() as u64, "response");
        });
        metrics::histogram!(
            m::HTTP_REQUEST_DURATION,
            "route" => route,
            "method" => method,
            "status_class" => m::status_class(status),
        )
        .record(elapsed.as_secs_f64());
        Ok(resp)
    }
}

/// Read-your-writes behind a read replica (`store::db::replica`): a request that may have
/// written, or whose lag-tolerant read the primary served, notes before its response
/// leaves how far what its caller wrote or saw reaches, so the caller's next lag-tolerant
/// read on any API process waits for it (its reads never go back in time). Without a
/// replica there is nothing to note.
pub struct NoteWrites;

impl<E: Endpoint> Middleware<E> for NoteWrites {
    type Output = NoteWritesEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        NoteWritesEp { inner: ep }
    }
}

pub struct NoteWritesEp<E> {
    inner: E,
}

impl<E: Endpoint> Endpoint for NoteWritesEp<E> {
    type Output = E::Output;

    async fn call(&self, req: Request) -> poem::Result<E::Output> {
        // The layers below are boxed here, once: the request's future would otherwise carry
        // them into every layer above, and each layer moves (copies) what it awaits.
        let inner = |req| Box::pin(self.inner.call(req));
        // Without a replica no read waits on a note: no slot, nothing recorded per request.
        let Some(replica) = req
            .data::<crate::state::AppState>()
            .and_then(|st| st.replica.clone())
        else {
            return inner(req).await;
        };
        let writes = !req.method().is_safe();
        current_request::with_caller_slot(async move {
            let out = inner(req).await;
            if let Some(caller) = current_request::caller()
                && (writes || current_request::read_primary())
            {
                replica.note_write(caller).await;
            }
            out
        })
        .await
    }
}

/// Reads the whole body up front with a hard limit (413 past it), whether or not the client
/// sent a Content-Length, then hands the bytes on.
pub struct BufferBody(pub usize);

impl<E: Endpoint> Middleware<E> for BufferBody {
    type Output = BufferBodyEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        BufferBodyEp {
            inner: ep,
            max: self.0,
        }
    }
}

pub struct BufferBodyEp<E> {
    inner: E,
    max: usize,
}

impl<E: Endpoint> Endpoint for BufferBodyEp<E> {
    type Output = E::Output;

    async fn call(&self, mut req: Request) -> poem::Result<E::Output> {
        let bytes = req.take_body().into_bytes_limit(self.max).await?;
        req.set_body(bytes);
        self.inner.call(req).await
    }
}

#[derive(Clone)]
struct EnvelopePanic;

impl PanicHandler for EnvelopePanic {
    type Response = Response;

    fn get_response(&self, _err: Box<dyn std::any::Any + Send + 'static>) -> Response {
        // The panic message went to the log through the panic hook; the caller gets only
        // the generic, retryable code.
        tracing::error!("handler panicked");
        errors::to_response(envelope::error(&ApiError::internal("handler panicked")))
    }
}

pub fn catch_panic() -> CatchPanic<impl PanicHandler> {
    CatchPanic::new().with_handler(EnvelopePanic)
}

/// The bound on a whole request (`WALLET_REQUEST_TIMEOUT_MS`). Each dependency has
/// bounds of its own (connect and acquire timeouts, `statement_timeout`, `lock_timeout`,
/// the Redis call timeout), but a server that stops answering without refusing (packets
/// dropped) can hold a query or a write on an open connection for as long as TCP keeps
/// retransmitting. Past the deadline the work is dropped: an open transaction rolls back,
/// a commit in flight either landed (a retry with the same Idempotency-Key replays it)
/// or did not (the retry runs it), and the caller gets a retryable 503.
pub struct Deadline(pub std::time::Duration);

impl<E: Endpoint> Middleware<E> for Deadline {
    type Output = DeadlineEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        DeadlineEp {
            inner: ep,
            limit: self.0,
        }
    }
}

pub struct DeadlineEp<E> {
    inner: E,
    limit: std::time::Duration,
}

impl<E: Endpoint> Endpoint for DeadlineEp<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        match tokio::time::timeout(self.limit, self.inner.call(req)).await {
            Ok(r) => r.map(IntoResponse::into_response),
            Err(_) => {
                tracing::warn!(
                    limit_ms = self.limit.as_millis() as u64,
                    "request ran past its deadline"
                );
                metrics::counter!(m::HTTP_DEADLINE_EXCEEDED).increment(1);
                Err(ApiError::Unavailable {
                    subsystem: crate::error::Subsystem::Deadline,
                    cause: "the request ran past its deadline".into(),
                }
                .into())
            }
        }
    }
}

/// Admission control: sheds load before the database's queue grows without bound. At most
/// `inflight` requests run at once and `queued` more wait (in arrival order) for one of
/// them to finish; a request past both is refused at once with a retryable 503
/// (`details.subsystem: capacity`, `Retry-After`). So under twice the traffic the service
/// can serve, the requests it takes keep their latency and the rest learn within
/// microseconds to come back, instead of every request waiting out the pool's timeout.
#[derive(Clone)]
pub struct Admission {
    permits: std::sync::Arc<tokio::sync::Semaphore>,
    in_system: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    limit: usize,
}

impl Admission {
    pub fn new(inflight: usize, queued: usize) -> Admission {
        Admission {
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(inflight.max(1))),
            in_system: std::sync::Arc::default(),
            limit: inflight.max(1) + queued,
        }
    }
}

impl<E: Endpoint> Middleware<E> for Admission {
    type Output = AdmissionEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        AdmissionEp {
            inner: ep,
            gate: self.clone(),
        }
    }
}

pub struct AdmissionEp<E> {
    inner: E,
    gate: Admission,
}

/// Counts a request out of the system however it ends (a dropped future included).
struct InSystem<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InSystem<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl<E: Endpoint> Endpoint for AdmissionEp<E> {
    type Output = E::Output;

    async fn call(&self, req: Request) -> poem::Result<E::Output> {
        // Health must answer whatever the load: it is how an orchestrator tells a busy
        // replica from a dead one.
        if req.original_uri().path() == "/v1/health" {
            return self.inner.call(req).await;
        }
        let counted = self
            .gate
            .in_system
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _out = InSystem(&self.gate.in_system);
        if counted >= self.gate.limit {
            metrics::counter!(m::HTTP_SHED).increment(1);
            return Err(ApiError::Unavailable {
                subsystem: crate::error::Subsystem::Capacity,
                cause: "too many requests in the service".into(),
            }
            .into());
        }
        let _permit = self
            .gate
            .permits
            .acquire()
            .await
            .map_err(|_| ApiError::internal("the admission gate closed"))?;
        self.inner.call(req).await
    }
}

/// Refuses a request whose path or query string decodes to a control character, before
/// anything routes it: the body's strings follow the same rule (`strict_json`), so no
/// string of any route reaches the database, a log line or a lookup with one in it.
pub struct RefuseControlChars;

impl<E: Endpoint> Middleware<E> for RefuseControlChars {
    type Output = RefuseControlCharsEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        RefuseControlCharsEp { inner: ep }
    }
}

pub struct RefuseControlCharsEp<E> {
    inner: E,
}

impl<E: Endpoint> Endpoint for RefuseControlCharsEp<E> {
    type Output = E::Output;

    async fn call(&self, req: Request) -> poem::Result<E::Output> {
        if let Some(field) = control_chars_in(req.uri().path(), req.uri().query()) {
            return Err(ApiError::field(
                field,
                "control_characters",
                "must not contain control characters",
            )
            .into());
        }
        self.inner.call(req).await
    }
}

/// The field (`path`, or `query:<name>`) whose decoded text holds a control character.
pub fn control_chars_in(path: &str, query: Option<&str>) -> Option<String> {
    // Percent-encoding is the only way a control character reaches a URI: skip the work
    // for the common case of a URI with no escapes.
    if path.contains('%') && bad(&percent_decode(path, false)) {
        return Some("path".into());
    }
    let query = query.filter(|q| q.contains('%'))?;
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_decode(name, true);
        if bad(&name) {
            return Some("query".into());
        }
        if bad(&percent_decode(value, true)) {
            return Some(format!("query:{name}"));
        }
    }
    None
}

fn bad(s: &str) -> bool {
    crate::http::pipeline::strict_json::has_control_chars(s)
}

/// `%XX` escapes decoded (and `+` as a space in a query), invalid UTF-8 replaced.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_character_in_the_path_or_a_query_value_is_named() {
        assert_eq!(
            control_chars_in("/v1/settlements/ab%00cd", None).as_deref(),
            Some("path")
        );
        assert_eq!(
            control_chars_in(
                "/v1/webhooks/subscriptions",
                Some("limit=5&event_type=payment.completed%00")
            )
            .as_deref(),
            Some("query:event_type")
        );
        assert_eq!(
            control_chars_in("/v1/operator/dead-letters", Some("queue=a%0Ab")).as_deref(),
            Some("query:queue")
        );
        assert_eq!(
            control_chars_in("/v1/x", Some("error=%C2%85")).as_deref(),
            Some("query:error"),
            "C1 controls, UTF-8 encoded"
        );
        assert_eq!(
            control_chars_in("/v1/x", Some("a%01=1")).as_deref(),
            Some("query")
        );
    }

    #[test]
    fn ordinary_escapes_pass() {
        assert_eq!(
            control_chars_in("/v1/a%20b", Some("phone=%2B4915112345678&q=a+b")),
            None
        );
        assert_eq!(control_chars_in("/v1/a", Some("x=100%")), None);
        assert_eq!(control_chars_in("/v1/a%", Some("x=%4")), None);
        assert_eq!(control_chars_in("/v1/caf%C3%A9", None), None);
    }
}
