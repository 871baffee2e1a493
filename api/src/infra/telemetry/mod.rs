//! Logs, metrics and traces. Logs are JSON in production and human-readable in embedded
//! mode; every line inside a request or job carries its request id (from its span). Secrets
//! never reach a log line: they are `Secret`s, whose Debug and Display print `***`.
pub mod metrics;
pub mod trace;

use std::{io::IsTerminal, sync::OnceLock};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Logging only, for the command lines and tests: no spans are exported.
pub fn init_logging(json: bool) {
    init(json, None);
}

/// Logging and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, span export as `service`. Call
/// inside the runtime; `shutdown` at exit sends what is still buffered.
pub fn init_service(json: bool, service: &'static str) {
    init(json, Some(service));
}

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

fn init(json: bool, service: Option<&'static str>) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn,apalis=warn"));
    let provider = service.and_then(trace::provider);
    // What a trace needs and no more: the spans, and warnings and errors as their events.
    // Per-span timing of every poll, source locations and thread names cost a fifth more
    // instructions per payment and answer nothing an on-call person asks of a trace.
    let otel = provider.as_ref().zip(service).map(|(p, s)| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(s))
            .with_error_records_to_exceptions(true)
            .with_tracked_inactivity(false)
            .with_location(false)
            .with_threads(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.is_span() || *m.level() <= tracing::Level::WARN
            }))
    });
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    // A second init (tests start several apps in one process) keeps the first subscriber.
    let installed = if json {
        registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false),
            )
            .try_init()
    } else {
        registry
            .with(fmt::layer().compact().with_ansi(colour()))
            .try_init()
    };
    if let (Ok(()), Some(p)) = (installed, provider) {
        let _ = PROVIDER.set(p);
    }
}

/// Sends the spans still buffered and stops the exporter (a no-op when tracing is off).
pub async fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        // The provider's shutdown blocks until its export thread is done.
        let p = p.clone();
        let _ = tokio::task::spawn_blocking(move || p.shutdown()).await;
    }
}

/// Colour only for a person at a terminal: a log redirected to a file or a pipe (a service
/// manager, `| less`, CI) gets plain text, and `NO_COLOR` turns it off everywhere.
fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The process-wide Prometheus recorder (see `metrics::handle`).
pub fn metrics_handle() -> metrics_exporter_prometheus::PrometheusHandle {
    metrics::handle()
}
