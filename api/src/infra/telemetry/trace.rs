//! Distributed tracing. `tracing` spans are exported over OTLP/HTTP (JSON) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, and not at all otherwise: no layer is installed,
//! so tracing off costs nothing but the spans the logs already have. The standard
//! `OTEL_*` variables (service name, headers, sampler, batch delays) apply as the SDK reads
//! them.
//!
//! A W3C `traceparent` travels with the work either way: the request's (or, when tracing is
//! on, its server span's) is stored with each outbox row and webhook delivery, becomes the
//! parent of the job or delivery span, and is sent to the webhook receiver. With tracing
//! off it is passed on unchanged, so a caller's own trace still reaches its receiver.
use std::{
    collections::HashMap,
    sync::atomic::{AtomicBool, Ordering},
};

use opentelemetry::{global, trace::TraceContextExt};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{SpanExporter, WithHttpConfig};
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are being exported (`OTEL_EXPORTER_OTLP_ENDPOINT` was set at start-up).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The exporter's provider, or none when tracing is off.
pub(super) fn provider(service: &'static str) -> Option<SdkTracerProvider> {
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok()?;
    if endpoint.trim().is_empty() {
        return None;
    }
    // The exporter's client is built now; reqwest has no TLS provider of its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let client = RuntimeClient {
        client: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .ok()?,
        runtime,
    };
    let exporter = match SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("OTEL_EXPORTER_OTLP_ENDPOINT is set but the exporter failed: {e}");
            return None;
        }
    };
    // `Resource::builder` reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the
    // process's own name is only the default.
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service);
    }
    let provider = SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter)
        .build();
    global::set_text_map_propagator(TraceContextPropagator::new());
    ENABLED.store(true, Ordering::Relaxed);
    Some(provider)
}

/// Makes `span` continue the trace of `traceparent` (a request's header, or one stored with
/// an outbox row). Must run before the span is first entered. Nothing happens when tracing
/// is off or the value is not a W3C traceparent.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(tp) = traceparent.filter(|tp| is_traceparent(tp)) else {
        return;
    };
    if !enabled() {
        return;
    }
    let carrier = HashMap::from([("traceparent".to_string(), tp.to_string())]);
    let parent = global::get_text_map_propagator(|p| p.extract(&carrier));
    let _ = span.set_parent(parent);
}

/// Like `continue_trace`, unless the work already runs inside that trace (a delivery sent by
/// the job that continues its trace): then `span` stays a child of the current span, so the
/// trace reads request → relay → job → delivery rather than the delivery beside the job.
pub fn continue_trace_unless_inside(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(tp) = traceparent
        && enabled()
    {
        let current = tracing::Span::current()
            .context()
            .span()
            .span_context()
            .trace_id();
        if tp.split('-').nth(1) == Some(current.to_string().as_str()) {
            return;
        }
    }
    continue_trace(span, traceparent)
}

/// The `traceparent` of the current span (the transaction an outbox row is written in), or
/// `fallback` when tracing is off.
pub fn current_traceparent(fallback: Option<&str>) -> Option<String> {
    traceparent(&tracing::Span::current(), fallback)
}

/// The `traceparent` that names `span` (when tracing is on and it is sampled in or out), or
/// `fallback` (the one the work arrived with) when tracing is off.
pub fn traceparent(span: &tracing::Span, fallback: Option<&str>) -> Option<String> {
    if enabled() {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        if sc.is_valid() {
            return Some(format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            ));
        }
    }
    fallback.filter(|tp| is_traceparent(tp)).map(str::to_string)
}

/// A W3C trace context `traceparent` of version 00: lowercase hex ids, neither all zero.
pub fn is_traceparent(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
}

/// reqwest (async) as the exporter's transport. The SDK's batch processor exports from its
/// own thread, which has no tokio reactor: the request runs on the process's runtime and
/// only its result is awaited there.
#[derive(Debug, Clone)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move {
                let response = client.execute(reqwest::Request::try_from(request)?).await?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = response.bytes().await?;
                let mut out = Response::builder().status(status).body(body)?;
                *out.headers_mut() = headers;
                Ok::<_, HttpError>(out)
            })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_w3c_traceparent_is_taken() {
        assert!(is_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
        ] {
            assert!(!is_traceparent(bad), "{bad:?}");
        }
    }
}
