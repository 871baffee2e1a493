//! `Reply<T>`: what every operation returns. The body is the envelope rendered to bytes by
//! `crate::envelope` (so stored responses replay byte for byte); the OpenAPI document
//! describes it with the schemas below.
use std::marker::PhantomData;

use poem::{IntoResponse, Response};
use poem_openapi::{
    ApiResponse, Enum, Object,
    registry::{MetaMediaType, MetaResponse, MetaResponses, Registry},
    types::{ParseFromJSON, ToJSON, Type},
};
use serde::Serialize;

use crate::envelope::{self, Page, Rendered};
use crate::store::db::replica::Served;

pub struct Reply<T> {
    rendered: Rendered,
    _data: PhantomData<fn() -> T>,
}

impl<T> Reply<T> {
    /// Whether this answer replays one stored for an earlier request with the same key.
    pub fn replayed(&self) -> bool {
        self.rendered.replayed
    }

    /// Sends the caller's rate-limit standing with the answer (`X-RateLimit-*`).
    pub fn with_rate(mut self, rate: crate::error::RateLimitInfo) -> Self {
        self.rendered.rate = Some(rate);
        self
    }
}

impl<T: Serialize> Reply<T> {
    pub fn ok(data: &T) -> Self {
        Self::rendered(envelope::ok(data))
    }

    pub fn page(data: &T, page: &Page) -> Self {
        Self::rendered(envelope::ok_page(data, page))
    }

    /// A read that tolerates lag, saying where it was served (`meta.capabilities.served_from`).
    pub fn lagging(data: &T, served: Served) -> Self {
        Self::rendered(envelope::ok_with(data, &served_from(served)))
    }

    /// A page of a read that tolerates lag, saying where it was served.
    pub fn lagging_page(data: &T, page: &Page, served: Served) -> Self {
        Self::rendered(envelope::ok_page_with(data, page, &served_from(served)))
    }
}

fn served_from(served: Served) -> envelope::MetaExtra {
    envelope::MetaExtra {
        capabilities: Some(serde_json::json!({ "served_from": served.as_str() })),
        ..Default::default()
    }
}

impl<T> Reply<T> {
    pub fn rendered(rendered: Rendered) -> Self {
        Reply {
            rendered,
            _data: PhantomData,
        }
    }
}

impl<T: Send> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        crate::http::pipeline::errors::to_response(self.rendered)
    }
}

impl<T: Type + ParseFromJSON + ToJSON> ApiResponse for Reply<T> {
    fn meta() -> MetaResponses {
        responses::<T>(200, "Success: `ok` is true and `data` holds the result.")
    }

    fn register(registry: &mut Registry) {
        SuccessEnvelope::<T>::register(registry);
        ErrorEnvelope::register(registry);
    }
}

/// A reply to work accepted now and done later (202), such as a report run: the envelope
/// holds what was accepted; how it ends is read or delivered later.
pub struct Accepted<T>(pub Reply<T>);

impl<T: Send> IntoResponse for Accepted<T> {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

impl<T: Type + ParseFromJSON + ToJSON> ApiResponse for Accepted<T> {
    fn meta() -> MetaResponses {
        responses::<T>(
            202,
            "Accepted: `ok` is true and `data` holds what was accepted; it completes later.",
        )
    }

    fn register(registry: &mut Registry) {
        SuccessEnvelope::<T>::register(registry);
        ErrorEnvelope::register(registry);
    }
}

/// The responses every operation documents: its success, and the error envelope.
fn responses<T: Type + ParseFromJSON + ToJSON>(
    status: u16,
    description: &'static str,
) -> MetaResponses {
    let json = "application/json; charset=utf-8";
    MetaResponses {
        responses: vec![
            MetaResponse {
                description,
                status: Some(status),
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: json,
                    schema: SuccessEnvelope::<T>::schema_ref(),
                }],
                headers: vec![],
            },
            MetaResponse {
                description: "Client error: `ok` is false and `error.code` says why. Branch on the code, not the status.",
                status: None,
                status_range: Some("4XX".into()),
                content: vec![MetaMediaType {
                    content_type: json,
                    schema: ErrorEnvelope::schema_ref(),
                }],
                headers: vec![],
            },
            MetaResponse {
                description: "Service error (INTERNAL_SERVER_ERROR): retry with the same Idempotency-Key.",
                status: None,
                status_range: Some("5XX".into()),
                content: vec![MetaMediaType {
                    content_type: json,
                    schema: ErrorEnvelope::schema_ref(),
                }],
                headers: vec![],
            },
        ],
    }
}

/// Response metadata.
#[derive(Object)]
pub struct ResponseMeta {
    /// The service's id for this response (also the `X-Request-Id` header). On an
    /// idempotent replay it is the id of the original response.
    pub request_id: String,
    /// The version that served the response.
    pub api_version: String,
    /// True when this is a byte-identical replay of an earlier call with the same
    /// Idempotency-Key (only this flag differs).
    pub idempotency_replayed: bool,
    /// Paginated reads only: pass it as `cursor` to get the next page; null on the last page.
    #[oai(nullable)]
    pub next_cursor: Option<String>,
    /// Paginated reads only.
    pub has_more: Option<bool>,
    /// How complete the data the caller sent is, 0 to 100 (payments: order reference,
    /// branch, terminal, basket lines and their categories; identify: branch, terminal,
    /// cashier, partner session). Opaque: more is better.
    pub data_completeness_score: Option<i32>,
    /// The correlation id of a decision (identify, session identify, offer evaluation,
    /// payment): the `meta.decision_trace_id` you sent, else one the service issued. It
    /// is kept with the decision (in its events) for support.
    #[oai(nullable)]
    pub decision_trace_id: Option<String>,
    /// Additive hints; unknown keys are not an error. Identify: `can_pay` (the wallet may
    /// pay now), `enrollment_required` (phone proof is pending). Payment: `voidable`,
    /// `refundable`. The transaction and event feeds: `served_from`, `replica` or `primary`
    /// (either way the answer includes every write committed before the request began).
    pub capabilities: Option<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// A successful response.
#[derive(Object)]
pub struct SuccessEnvelope<T: ParseFromJSON + ToJSON> {
    /// Always true here.
    pub ok: bool,
    pub data: T,
    /// Always null here.
    #[oai(nullable)]
    pub error: Option<ErrorObject>,
    pub meta: ResponseMeta,
}

/// A failed response.
#[derive(Object)]
pub struct ErrorEnvelope {
    /// Always false here.
    pub ok: bool,
    /// Always null here.
    #[oai(nullable)]
    pub data: Option<serde_json::Value>,
    pub error: ErrorObject,
    pub meta: ResponseMeta,
}

/// Every error code the service returns. Unknown codes must be treated as non-retryable.
#[derive(Enum)]
#[oai(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCodeDoc {
    InvalidApiKey,
    Forbidden,
    NotFound,
    ValidationError,
    InsufficientFunds,
    IdempotencyKeyReused,
    Conflict,
    RateLimited,
    CurrencyNotSupported,
    WalletProgramAmbiguous,
    CredentialTypeUnsupported,
    RequiresDynamicCredential,
    InternalServerError,
    OtpExpired,
    OtpInvalid,
    CredentialExpiredOrReplayed,
}

/// The error object.
///
/// `details` by code: INSUFFICIENT_FUNDS `{shortfall_minor, available_actual_minor,
/// available_promo_minor, currency}`; CURRENCY_NOT_SUPPORTED `{supported: [..]}`;
/// WALLET_PROGRAM_AMBIGUOUS `{candidates: [..]}`; CREDENTIAL_TYPE_UNSUPPORTED
/// `{supported: [..]}`; RATE_LIMITED `{limit, window_seconds, retry_after_seconds}`;
/// VALIDATION_ERROR `{fields: [{field, issue, message}]}` where `field` is a JSON pointer
/// into the body (`/amount_minor`) or `header:NAME` / `query:NAME` / `path`;
/// INTERNAL_SERVER_ERROR `{retryable: true, subsystem?}`.
#[derive(Object)]
pub struct ErrorObject {
    pub code: ErrorCodeDoc,
    /// Human-readable; do not parse it.
    pub message: String,
    #[oai(nullable)]
    pub details: Option<serde_json::Value>,
}
