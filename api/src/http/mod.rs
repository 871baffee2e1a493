//! The HTTP edge: poem-openapi operations, a folder per subdomain (platform,
//! credentials, customers, payments, top-ups, incentives, transactions, webhooks,
//! operator, sandbox), the request pipeline every request passes (`pipeline`) and the
//! OpenAPI document's assembly (`openapi`).
pub mod credentials;
pub mod customers;
pub mod incentives;
pub mod openapi;
pub mod operator;
pub mod payments;
pub mod pipeline;
pub mod platform;
pub mod reporting;
pub mod risk;
pub mod sandbox;
pub mod topups;
pub mod transactions;
pub mod webhooks;

use poem::{Endpoint, EndpointExt, Response, Route, endpoint::make_sync, get, http::StatusCode};

use crate::state::AppState;

/// The whole HTTP application.
pub fn routes(state: AppState) -> impl Endpoint {
    // The document is the HTTP layer's own: built here, shared with the operations that
    // serve it or list what a caller may call.
    let doc = std::sync::Arc::new(openapi::build());
    let table = std::sync::Arc::new(openapi::route_table::RouteTable::new(
        &doc.operations,
        &["/v1/openapi.json", "/v1/docs"],
    ));
    let doc_json = std::sync::Arc::new(openapi::public_document::PublicDocument::new(
        doc.json.clone(),
        "application/json; charset=utf-8",
    ));
    let docs_html = std::sync::Arc::new(openapi::public_document::PublicDocument::new(
        doc.docs_html.clone(),
        "text/html; charset=utf-8",
    ));
    let (inflight, queued) = state.config.admission();
    let admission = pipeline::middleware::Admission::new(inflight, queued);
    let app = Route::new()
        .at(
            "/v1/openapi.json",
            get(make_sync(move |req| doc_json.respond(&req))),
        )
        .at(
            "/v1/docs",
            get(make_sync(move |req| docs_html.respond(&req))),
        )
        .nest(
            "/v1",
            openapi::service()
                .with(pipeline::early_replay::EarlyReplay)
                .with(pipeline::middleware::RefuseControlChars)
                .with(admission)
                .data(doc),
        )
        .nest("/ops", crate::console::routes());
    with_middleware(
        app.with(pipeline::router_answers::RouterAnswers(table.clone())),
        state,
        table,
    )
}

/// The metrics listener (`WALLET_METRICS_LISTEN_ADDR`) of either process: `/metrics`, and
/// `/health` for the worker's probes (the API's health is `/v1/health` on its public port).
/// Kept off the public listener so that an Ingress or a load balancer in front of the API
/// can never expose it.
pub fn metrics_routes(state: AppState) -> impl Endpoint {
    let metrics = state.metrics.clone();
    let table = std::sync::Arc::new(openapi::route_table::RouteTable::new(
        &[],
        &["/health", "/metrics"],
    ));
    let app = Route::new()
        .at("/health", get(worker_health))
        .at("/metrics", metrics_endpoint(metrics));
    with_middleware(app, state, table)
}

#[poem::handler]
async fn worker_health(state: poem::web::Data<&AppState>) -> Response {
    let h = state.0.health().await;
    pipeline::errors::to_response(crate::envelope::ok(&platform::HealthView::from(h)))
}

/// Prometheus text of this process's recorder.
fn metrics_endpoint(handle: metrics_exporter_prometheus::PrometheusHandle) -> impl Endpoint {
    get(make_sync(move |_| {
        Response::builder()
            .status(StatusCode::OK)
            .content_type("text/plain; version=0.0.4")
            .body(handle.render())
    }))
}

/// The layers every request passes, around any endpoint: request id and envelope for
/// every error, panic capture, body limit, shared state, request metrics labelled by the
/// templates of `routes`. Public so tests can put a deliberately failing endpoint behind
/// the real stack.
pub fn with_middleware<E: Endpoint + 'static>(
    ep: E,
    state: AppState,
    routes: std::sync::Arc<openapi::route_table::RouteTable>,
) -> impl Endpoint {
    let max = state.config.max_body_bytes;
    let deadline = std::time::Duration::from_millis(state.config.request_timeout_ms);
    ep.with(pipeline::middleware::BufferBody(max))
        .with(pipeline::middleware::catch_panic())
        .with(pipeline::middleware::NoteWrites)
        .data(state)
        .with(pipeline::middleware::Deadline(deadline))
        .with(pipeline::middleware::PerRequest(routes))
}
