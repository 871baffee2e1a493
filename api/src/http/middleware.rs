//! The outer layers every request passes: request id and log span, body buffering with a
//! size limit, panic capture, and conversion of any error into the envelope.
use std::time::Instant;

use poem::{
    Endpoint, IntoResponse, Middleware, Request, Response,
    http::HeaderValue,
    middleware::{CatchPanic, PanicHandler},
};
use tracing::Instrument;

use crate::{envelope, error::ApiError, request_context};

use super::errors;

/// Request id (accepting a caller's `X-Request-Id` only when it is short and printable),
/// tracing span, error → envelope, and the `X-Request-Id` header on every response.
pub struct RequestContext;

impl<E: Endpoint> Middleware<E> for RequestContext {
    type Output = RequestContextEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        RequestContextEp { inner: ep }
    }
}

pub struct RequestContextEp<E> {
    inner: E,
}

fn usable_request_id(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    (!s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    .then(|| s.to_string())
}

impl<E: Endpoint> Endpoint for RequestContextEp<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let id = req
            .headers()
            .get("x-request-id")
            .and_then(usable_request_id)
            .unwrap_or_else(request_context::new_request_id);
        let span = tracing::info_span!(
            "request",
            request_id = %id,
            method = %req.method(),
            path = %req.uri().path(),
        );
        let started = Instant::now();
        let method = req.method().to_string();
        let mut resp = request_context::scope(id.clone(), async move {
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
        if let Ok(v) = HeaderValue::from_str(&id) {
            resp.headers_mut().insert("x-request-id", v);
        }
        let status = resp.status().as_u16();
        let elapsed = started.elapsed();
        span.in_scope(|| {
            tracing::info!(status, elapsed_ms = elapsed.as_millis() as u64, "response");
        });
        metrics::histogram!("http_request_duration_seconds", "method" => method, "status" => status.to_string())
            .record(elapsed.as_secs_f64());
        Ok(resp)
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
