//! Requests as the suite sends them: `send` reads a response whole into a `Reply`, checks
//! an error against the codes the document promises and records examples on the way.
use serde_json::{Value, json};

use crate::{documented_errors, examples};

/// A response read whole: status, headers and the parsed envelope.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub bytes: Vec<u8>,
    pub body: Value,
}

impl Reply {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// `(field, issue)` pairs of a VALIDATION_ERROR.
    pub fn field_issues(&self) -> Vec<(String, String)> {
        self.body["error"]["details"]["fields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| {
                        (
                            f["field"].as_str().unwrap_or("").to_string(),
                            f["issue"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asserts a 400 VALIDATION_ERROR whose field errors name `field`.
    pub fn assert_field_error(&self, field: &str) -> &Self {
        self.assert_envelope();
        assert_eq!(
            (self.status, self.code()),
            (400, "VALIDATION_ERROR"),
            "{}",
            self.body
        );
        assert!(
            self.field_issues().iter().any(|(f, _)| f == field),
            "a field error on {field}: {}",
            self.body
        );
        self
    }

    /// This response's text as its idempotent replay answers it: byte for byte the same but
    /// for `meta.idempotency_replayed`, which a replay sets.
    pub fn as_replayed(&self) -> String {
        String::from_utf8(self.bytes.clone())
            .expect("a UTF-8 body")
            .replace(
                "\"idempotency_replayed\":false",
                "\"idempotency_replayed\":true",
            )
    }

    /// The response's text.
    pub fn text(&self) -> String {
        String::from_utf8(self.bytes.clone()).expect("a UTF-8 body")
    }

    /// Asserts the envelope's shape: ok/data/error/meta with a request id that matches the
    /// X-Request-Id header.
    pub fn assert_envelope(&self) -> &Self {
        let b = &self.body;
        assert!(b["ok"].is_boolean(), "no ok: {b}");
        assert!(
            b.get("data").is_some() && b.get("error").is_some(),
            "no data/error: {b}"
        );
        let rid = b["meta"]["request_id"].as_str().expect("meta.request_id");
        assert!(!rid.is_empty());
        assert_eq!(b["meta"]["api_version"], "2026-06-01");
        if b["meta"]["idempotency_replayed"] != json!(true) {
            let header = self
                .headers
                .get("x-request-id")
                .expect("X-Request-Id header");
            assert_eq!(header.to_str().unwrap(), rid);
        }
        self
    }
}

pub async fn send(req: reqwest::RequestBuilder) -> Reply {
    let (client, req) = req.build_split();
    let req = req.expect("request built");
    let (method, url) = (req.method().to_string(), req.url().clone());
    let sent = req
        .body()
        .and_then(reqwest::Body::as_bytes)
        .map(<[u8]>::to_vec);
    let resp = client.execute(req).await.expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body").to_vec();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "response is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    let reply = Reply {
        status,
        headers,
        bytes,
        body,
    };
    documented_errors::check(&method, &url, &reply);
    examples::record(&method, &url, sent.as_deref(), &reply);
    reply
}
