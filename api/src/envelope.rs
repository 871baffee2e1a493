//! The `{ok, data, error, meta}` envelope every response uses, rendered to bytes here and
//! nowhere else, so a stored response and its replay are the same bytes.
use serde::Serialize;
use serde_json::value::RawValue;

use crate::{error::ApiError, infra::current_request};

/// The only `api_version` this build serves. A breaking change ships as a new date.
pub const API_VERSION: &str = "2026-06-01";
pub const SUPPORTED_API_VERSIONS: &[&str] = &[API_VERSION];

/// Cursor pagination fields of a list response's meta.
#[derive(Clone, Debug, Default)]
pub struct Page {
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

/// Optional meta a result adds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MetaExtra {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_completeness_score: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_trace_id: Option<String>,
    /// Additive hints (`http::pipeline::reply::ResponseMeta::capabilities` documents them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct Meta<'a> {
    request_id: &'a str,
    api_version: &'a str,
    // Keep this the last non-optional key: `mark_replayed` relies on it sitting in meta.
    idempotency_replayed: bool,
    #[serde(flatten)]
    extra: MetaExtra,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    has_more: Option<bool>,
}

#[derive(Serialize)]
struct Envelope<'a, D: Serialize + ?Sized> {
    ok: bool,
    data: Option<&'a D>,
    error: Option<&'a RawValue>,
    meta: Meta<'a>,
}

/// A rendered response: status and the exact bytes to send.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub status: u16,
    pub body: Vec<u8>,
    pub replayed: bool,
    pub retry_after: Option<u64>,
    /// Sent as the `X-RateLimit-*` headers.
    pub rate: Option<crate::error::RateLimitInfo>,
}

impl Rendered {
    pub fn with_rate(mut self, rate: crate::error::RateLimitInfo) -> Self {
        self.rate = Some(rate);
        self
    }
}

pub fn ok<D: Serialize + ?Sized>(data: &D) -> Rendered {
    render(200, Some(data), None, None)
}

pub fn ok_with<D: Serialize + ?Sized>(data: &D, extra: &MetaExtra) -> Rendered {
    render_with(200, Some(data), None, None, extra.clone())
}

/// A success with its status (200, or 202 for work accepted and done later).
pub fn ok_status_with<D: Serialize + ?Sized>(status: u16, data: &D, extra: &MetaExtra) -> Rendered {
    render_with(status, Some(data), None, None, extra.clone())
}

pub fn ok_page<D: Serialize + ?Sized>(data: &D, page: &Page) -> Rendered {
    render(200, Some(data), None, Some(page))
}

pub fn ok_page_with<D: Serialize + ?Sized>(data: &D, page: &Page, extra: &MetaExtra) -> Rendered {
    render_with(200, Some(data), None, Some(page), extra.clone())
}

pub fn error(err: &ApiError) -> Rendered {
    let body = serde_json::to_string(&err.to_body()).expect("error bodies serialise");
    let raw = RawValue::from_string(body).expect("valid JSON");
    let extra = MetaExtra {
        decision_trace_id: err.decision_trace_id().map(str::to_string),
        ..MetaExtra::default()
    };
    let mut r = render_with::<()>(err.status(), None, Some(&raw), None, extra);
    r.retry_after = err.retry_after();
    r.rate = err.rate();
    r
}

fn render<D: Serialize + ?Sized>(
    status: u16,
    data: Option<&D>,
    error: Option<&RawValue>,
    page: Option<&Page>,
) -> Rendered {
    render_with(status, data, error, page, MetaExtra::default())
}

fn render_with<D: Serialize + ?Sized>(
    status: u16,
    data: Option<&D>,
    error: Option<&RawValue>,
    page: Option<&Page>,
    extra: MetaExtra,
) -> Rendered {
    let request_id = current_request::request_id();
    let env = Envelope {
        ok: error.is_none(),
        data,
        error,
        meta: Meta {
            request_id: &request_id,
            api_version: API_VERSION,
            idempotency_replayed: false,
            extra,
            next_cursor: page.map(|p| p.next_cursor.as_deref()),
            has_more: page.map(|p| p.has_more),
        },
    };
    Rendered {
        status,
        body: serde_json::to_vec(&env).expect("response data serialises"),
        replayed: false,
        retry_after: None,
        rate: None,
    }
}

/// The stored bytes of an earlier response, with `meta.idempotency_replayed` set to true.
/// Everything else, `meta.request_id` included, is the original response byte for byte.
pub fn mark_replayed(stored: &[u8]) -> Vec<u8> {
    const FALSE: &[u8] = br#""idempotency_replayed":false"#;
    const TRUE: &[u8] = br#""idempotency_replayed":true"#;
    // The meta object is serialised last, so its key is the last occurrence.
    match stored.windows(FALSE.len()).rposition(|w| w == FALSE) {
        Some(i) => {
            let mut out = Vec::with_capacity(stored.len());
            out.extend_from_slice(&stored[..i]);
            out.extend_from_slice(TRUE);
            out.extend_from_slice(&stored[i + FALSE.len()..]);
            out
        }
        None => stored.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[tokio::test]
    async fn success_and_error_share_one_envelope() {
        let (ok_body, err_body) = current_request::scope("req_1".into(), async {
            (
                ok(&json!({"x": 1})).body,
                error(&ApiError::not_found("Key")).body,
            )
        })
        .await;
        let ok_v: Value = serde_json::from_slice(&ok_body).unwrap();
        assert_eq!(ok_v["ok"], true);
        assert_eq!(ok_v["data"]["x"], 1);
        assert_eq!(ok_v["error"], Value::Null);
        assert_eq!(ok_v["meta"]["request_id"], "req_1");
        assert_eq!(ok_v["meta"]["api_version"], API_VERSION);
        let err_v: Value = serde_json::from_slice(&err_body).unwrap();
        assert_eq!(err_v["ok"], false);
        assert_eq!(err_v["data"], Value::Null);
        assert_eq!(err_v["error"]["code"], "NOT_FOUND");
    }

    #[test]
    fn a_replay_differs_only_in_the_replayed_flag() {
        let original = ok(&json!({"note": "\"idempotency_replayed\":false"})).body;
        let replay = mark_replayed(&original);
        let v: Value = serde_json::from_slice(&replay).unwrap();
        assert_eq!(v["meta"]["idempotency_replayed"], true);
        assert_eq!(v["data"]["note"], "\"idempotency_replayed\":false");
        let o: Value = serde_json::from_slice(&original).unwrap();
        assert_eq!(o["meta"]["request_id"], v["meta"]["request_id"]);
        // "false" becomes "true": one byte shorter, nothing else moves.
        assert_eq!(replay.len(), original.len() - 1);
    }
}
