//! A stand-in OpenTelemetry collector: accepts OTLP/HTTP JSON on `POST /v1/traces` (what
//! the service exports) and keeps every span it got, with the service that sent it.
use std::sync::{Arc, Mutex};

use poem::{Request, Response, http::StatusCode};
use serde_json::Value;

#[derive(Clone, Debug)]
pub struct Span {
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// The span's attributes, as `key -> value` (string values only).
    pub attributes: Vec<(String, String)>,
}

#[derive(Clone)]
pub struct Collector {
    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` is set to.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<Span>>>,
    posts: Arc<Mutex<Vec<String>>>,
}

impl Collector {
    pub async fn start() -> Collector {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let posts: Arc<Mutex<Vec<String>>> = Arc::default();
        let (s, p) = (spans.clone(), posts.clone());
        let ep = poem::endpoint::make(move |req: Request| {
            let (s, p) = (s.clone(), p.clone());
            async move {
                let path = req.uri().path().to_string();
                let content_type = req.content_type().unwrap_or_default().to_string();
                let body = req.into_body().into_vec().await.unwrap_or_default();
                p.lock().unwrap().push(format!("{path} {content_type}"));
                if path != "/v1/traces" {
                    return Response::builder().status(StatusCode::NOT_FOUND).finish();
                }
                let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                    return Response::builder().status(StatusCode::BAD_REQUEST).finish();
                };
                s.lock().unwrap().extend(spans_of(&v));
                Response::builder()
                    .status(StatusCode::OK)
                    .content_type("application/json")
                    .body("{}")
            }
        });
        let port = crate::serve_endpoint(ep).await;
        Collector {
            endpoint: format!("http://127.0.0.1:{port}"),
            spans,
            posts,
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Every request the collector got (`path content-type`).
    pub fn posts(&self) -> Vec<String> {
        self.posts.lock().unwrap().clone()
    }

    pub fn trace(&self, trace_id: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }
}

fn spans_of(v: &Value) -> Vec<Span> {
    let mut out = vec![];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    for rs in v["resourceSpans"].as_array().into_iter().flatten() {
        let service = rs["resource"]["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["key"] == "service.name")
            .map(|a| text(&a["value"]["stringValue"]))
            .unwrap_or_default();
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for s in ss["spans"].as_array().into_iter().flatten() {
                out.push(Span {
                    service: service.clone(),
                    name: text(&s["name"]),
                    trace_id: text(&s["traceId"]),
                    span_id: text(&s["spanId"]),
                    parent_span_id: text(&s["parentSpanId"]),
                    attributes: s["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| {
                            Some((
                                text(&a["key"]),
                                a["value"]["stringValue"].as_str()?.to_string(),
                            ))
                        })
                        .collect(),
                });
            }
        }
    }
    out
}
