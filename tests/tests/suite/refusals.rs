//! Whatever arrives malformed at any route, of the partner API or of the operations
//! console, is refused with a 4xx before anything runs: a body of a type the route does
//! not read, an empty one, a multipart form, one past the size limit, a method the route
//! does not take. Never a 5xx, which anyone who can reach a route could otherwise raise at
//! will (and with it the 5xx-ratio alert). The routes come from the live document and the
//! console's own route list, so a new route is covered the day it is added.
use reqwest::{Method, RequestBuilder};
use serde_json::Value;
use tests::{TestApp, shop::Shop};
use uuid::Uuid;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

#[derive(Clone, Copy, Debug)]
enum Malformed {
    PlainText,
    Empty,
    Multipart,
    Oversized,
    WrongMethod,
}

const ALL: [Malformed; 5] = [
    Malformed::PlainText,
    Malformed::Empty,
    Malformed::Multipart,
    Malformed::Oversized,
    Malformed::WrongMethod,
];

/// `req` carrying the malformed body of `case`.
fn malformed(req: RequestBuilder, case: Malformed, limit: usize) -> RequestBuilder {
    match case {
        Malformed::PlainText => req.header("content-type", "text/plain").body("hello"),
        Malformed::Empty => req.header("content-type", "application/json"),
        Malformed::Multipart => req
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .body(
                "--XyZ\r\nContent-Disposition: form-data; name=\"reason\"\r\n\r\nx\r\n--XyZ--\r\n",
            ),
        Malformed::Oversized => req
            .header("content-type", "application/json")
            .body(format!("{{\"reason\":\"{}\"}}", "x".repeat(limit + 1))),
        Malformed::WrongMethod => req,
    }
}

/// A method `allowed` does not hold.
fn other_method(allowed: &[String]) -> &'static str {
    METHODS
        .into_iter()
        .find(|m| !allowed.iter().any(|a| a.eq_ignore_ascii_case(m)))
        .expect("some method is not routed")
}

struct Probe<'a> {
    app: &'a TestApp,
    limit: usize,
    seen: usize,
    failures: Vec<String>,
}

impl Probe<'_> {
    /// Sends every malformed variant of `methods` on `path` (with `auth` added) and records
    /// any answer of 500 or more.
    async fn route(
        &mut self,
        path: &str,
        methods: &[String],
        auth: &dyn Fn(RequestBuilder) -> RequestBuilder,
    ) {
        let url = format!("{}{path}", self.app.server.url());
        for case in ALL {
            let sent: Vec<&str> = match case {
                Malformed::WrongMethod => vec![other_method(methods)],
                _ => methods.iter().map(String::as_str).collect(),
            };
            for m in sent {
                let req = self
                    .app
                    .client
                    .request(Method::from_bytes(m.as_bytes()).unwrap(), &url)
                    .header("Idempotency-Key", Uuid::new_v4().to_string());
                let r = malformed(auth(req), case, self.limit)
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("{m} {path} {case:?}: {e}"));
                self.seen += 1;
                let status = r.status();
                if status.is_server_error() {
                    let body = r.text().await.unwrap_or_default();
                    self.failures
                        .push(format!("{m} {path} {case:?}: {status} {body}"));
                }
            }
        }
    }
}

/// `template` with its parameters filled: the tenant's own integration where the path
/// names one (so the request is the caller's own), a fresh id anywhere else.
fn concrete(template: &str, integration: Uuid) -> String {
    template
        .split('/')
        .map(|seg| {
            let param = (seg.starts_with('{') && seg.ends_with('}')) || seg.starts_with(':');
            match seg {
                _ if !param => seg.to_string(),
                _ if seg.to_ascii_lowercase().contains("integration") => integration.to_string(),
                ":action" => "replay".to_string(),
                _ => Uuid::new_v4().to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_route_refuses_a_malformed_request_with_a_4xx_never_a_5xx() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let limit = app.server.state.config.max_body_bytes;
    let doc: Value = app
        .client
        .get(format!("{}/v1/openapi.json", app.server.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut probe = Probe {
        app: &app,
        limit,
        seen: 0,
        failures: Vec::new(),
    };

    // The partner API, with valid credentials so that the body is what gets refused.
    let key = shop.tenant.platform_key.clone();
    let token = shop.token.clone();
    let operator = shop.operator_key.clone();
    let partner = move |r: RequestBuilder| r.header("x-api-key", &key).bearer_auth(&token);
    let staff = move |r: RequestBuilder| r.header("x-operator-key", &operator);
    let paths = doc["paths"].as_object().expect("the document's paths");
    assert!(paths.len() > 50, "{} paths", paths.len());
    for (template, ops) in paths {
        let methods: Vec<String> = ops
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| METHODS.iter().any(|m| m.eq_ignore_ascii_case(k)))
            .map(|k| k.to_ascii_uppercase())
            .collect();
        let path = format!("/v1{}", concrete(template, shop.tenant.integration_id));
        if template.starts_with("/operator") {
            probe.route(&path, &methods, &staff).await;
        } else {
            probe.route(&path, &methods, &partner).await;
        }
    }

    // The console, signed out and signed in.
    let op = api::domain::operators::create(&app.server.state.db, "refusals", 10)
        .await
        .unwrap();
    let operator = api::domain::operators::Operator {
        id: op.operator_id,
        name: op.name,
    };
    let session = api::console::open_session(&app.server.state, &operator, "127.0.0.1")
        .await
        .unwrap();
    let cookie = format!("{}={session}", api::console::COOKIE);
    let signed_in = move |r: RequestBuilder| r.header("cookie", &cookie);
    let signed_out = |r: RequestBuilder| r;
    let mut console: Vec<(String, Vec<String>)> = Vec::new();
    for (method, template) in api::console::ROUTES {
        let path = format!("/ops{}", template.trim_end_matches('/'));
        match console.iter_mut().find(|(p, _)| *p == path) {
            Some((_, ms)) => ms.push(method.to_string()),
            None => console.push((path, vec![method.to_string()])),
        }
    }
    for (template, methods) in &console {
        let path = concrete(template, shop.tenant.integration_id);
        probe.route(&path, methods, &signed_out).await;
        probe.route(&path, methods, &signed_in).await;
    }

    assert!(probe.seen > 500, "{} requests", probe.seen);
    assert!(
        probe.failures.is_empty(),
        "{} of {} malformed requests got a 5xx:\n{}",
        probe.failures.len(),
        probe.seen,
        probe.failures.join("\n")
    );
}
