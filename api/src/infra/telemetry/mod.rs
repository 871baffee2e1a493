//! Logs and metrics. Logs are JSON in production and human-readable in embedded mode; every
//! line inside a request carries its request id (from the request span). Secrets never
//! reach a log line: they are `Secret`s, whose Debug and Display print `***`.
pub mod metrics;

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

pub fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn,apalis=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    // A second init (tests start several apps in one process) keeps the first subscriber.
    let _ = if json {
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
