//! The request envelope every mutating call carries: `meta` and `context`.
use poem_openapi::Object;
use serde::Deserialize;
use uuid::Uuid;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::{
    domain::{
        credentials::scope::Acting,
        validate::{self, Errors},
    },
    envelope::SUPPORTED_API_VERSIONS,
    error::ApiError,
    http::pipeline::fields::{
        self, ContextId, ContextText, DateTimeText, Field, Kind, Text, UuidText,
    },
};

/// Every timestamp a response carries: RFC 3339, UTC, milliseconds.
pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A path id that is not a UUID is a malformed request (VALIDATION_ERROR naming `field`,
/// e.g. `path:id`), not an unknown resource.
pub fn path_uuid(field: &str, raw: &str) -> Result<Uuid, ApiError> {
    let mut e = Errors::default();
    validate::uuid(&mut e, field, raw).ok_or_else(|| ApiError::validation(e.0))
}

/// An optional UUID field, checked when present.
pub fn optional_uuid<S: AsRef<str>>(e: &mut Errors, field: &str, v: &Option<S>) -> Option<Uuid> {
    v.as_ref()
        .and_then(|s| validate::uuid(e, field, s.as_ref()))
}

pub use crate::http::pipeline::fields::phone;

/// The acting scope with the terminal the request context names, unless the terminal JWT
/// carries its own (a signed terminal wins over the context's).
pub fn in_context(acting: Acting, ctx: &RequestContext) -> Acting {
    Acting {
        terminal_id: acting
            .terminal_id
            .or_else(|| ctx.terminal_id.clone().map(String::from)),
        ..acting
    }
}

/// The decision trace id of a decision path (identify, offer evaluation, payment): the
/// caller's `meta.decision_trace_id`, else a new one. Echoed in the response's meta and
/// kept with the decision.
pub fn decision_trace(meta: Option<&RequestMeta>) -> String {
    meta.and_then(|m| m.decision_trace_id.as_ref())
        .map(|t| t.to_string())
        .unwrap_or_else(|| format!("dtr_{}", Uuid::now_v7().simple()))
}

/// Request metadata.
#[derive(Object, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct RequestMeta {
    /// Your correlation id (UUID). Not the dedup key: that is the Idempotency-Key header.
    pub partner_request_id: UuidText,
    /// When the event happened at the POS (RFC 3339).
    #[oai(nullable)]
    pub occurred_at: Option<DateTimeText>,
    /// When the call was transmitted (RFC 3339).
    #[oai(nullable)]
    pub sent_at: Option<DateTimeText>,
    /// The API version the client speaks.
    pub api_version: Field<ApiVersion>,
    /// Your correlation id for a decision (identify, offer evaluation, payment): echoed in
    /// the response's `meta.decision_trace_id` and kept with the decision. Without one,
    /// those calls issue their own.
    #[oai(nullable)]
    pub decision_trace_id: Option<Text<1, 128>>,
}

/// `meta.api_version`: one of `SUPPORTED_API_VERSIONS`, with its own issue code.
pub struct ApiVersion;

impl Kind for ApiVersion {
    fn name() -> std::borrow::Cow<'static, str> {
        "string_api_version".into()
    }

    fn schema() -> poem_openapi::registry::MetaSchema {
        poem_openapi::registry::MetaSchema {
            enum_items: SUPPORTED_API_VERSIONS.iter().map(|v| (*v).into()).collect(),
            ..poem_openapi::registry::MetaSchema::new("string")
        }
    }

    fn check(e: &mut Errors, field: &str, version: &str) -> bool {
        let supported = SUPPORTED_API_VERSIONS.join(", ");
        if version.is_empty() {
            e.push(
                field,
                "required",
                format!("is required; supported versions: {supported}"),
            );
            false
        } else if !SUPPORTED_API_VERSIONS.contains(&version) {
            e.push(
                field,
                "unsupported_api_version",
                format!("{version} is not supported; supported versions: {supported}"),
            );
            false
        } else {
            true
        }
    }
}

impl RequestMeta {
    /// For the operations whose `meta` the spec marks optional (enrollment, claims, SKU
    /// top-up, reload-bonus config, session identify): a missing `meta` is no error.
    pub fn validate_optional(meta: &Option<Self>, e: &mut Errors) {
        if let Some(m) = meta {
            m.validate(e);
        }
    }

    pub fn validate(&self, e: &mut Errors) {
        if self.partner_request_id.is_empty() {
            e.push(
                "/meta/partner_request_id",
                "required",
                "is required (a UUID)",
            );
        } else {
            self.partner_request_id.check(e, "/meta/partner_request_id");
        }
        for (f, v) in [
            ("/meta/occurred_at", &self.occurred_at),
            ("/meta/sent_at", &self.sent_at),
        ] {
            if let Some(v) = v {
                v.check(e, f);
            }
        }
        if let Some(t) = &self.decision_trace_id {
            t.check(e, "/meta/decision_trace_id");
        }
        self.api_version.check(e, "/meta/api_version");
    }
}

pub use crate::http::pipeline::fields::empty_as_none;

/// Where the call comes from. Its optional fields may be null, absent or `""`, alike.
#[derive(Object, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct RequestContext {
    /// The merchant (enterprise) acted for; must be one the credential is authorized for.
    pub merchant_id: UuidText,
    /// Null when not applicable.
    #[oai(nullable)]
    #[serde(deserialize_with = "fields::empty_as_none")]
    pub branch_id: Option<ContextId>,
    /// Physical or logical terminal.
    #[oai(nullable)]
    #[serde(deserialize_with = "fields::empty_as_none")]
    pub terminal_id: Option<ContextText<64>>,
    /// Trusted only when signed into the terminal JWT.
    #[oai(nullable)]
    #[serde(deserialize_with = "fields::empty_as_none")]
    pub cashier_id: Option<ContextText<64>>,
    /// Your own session or order reference.
    #[oai(nullable)]
    #[serde(deserialize_with = "fields::empty_as_none")]
    pub partner_session_id: Option<ContextText<128>>,
    /// The checkout session this call belongs to (UUID); null on standalone calls.
    #[oai(nullable)]
    #[serde(deserialize_with = "fields::empty_as_none")]
    pub service_session_id: Option<ContextId>,
}

/// `context` with its ids parsed.
#[derive(Clone, Debug)]
pub struct ParsedContext {
    pub merchant_id: Uuid,
    pub branch_id: Option<Uuid>,
}

impl RequestContext {
    pub fn validate(&self, e: &mut Errors) {
        if self.merchant_id.is_empty() {
            e.push("/context/merchant_id", "required", "is required (a UUID)");
        } else {
            validate::uuid(e, "/context/merchant_id", &self.merchant_id);
        }
        if let Some(b) = &self.branch_id {
            validate::uuid(e, "/context/branch_id", b);
        }
        if let Some(s) = &self.service_session_id {
            validate::uuid(e, "/context/service_session_id", s);
        }
        for (f, v, max) in [
            ("/context/terminal_id", self.terminal_id.as_deref(), 64),
            ("/context/cashier_id", self.cashier_id.as_deref(), 64),
            (
                "/context/partner_session_id",
                self.partner_session_id.as_deref(),
                128,
            ),
        ] {
            if let Some(v) = v {
                validate::length(e, f, v, 1, max);
                validate::no_control_chars(e, f, v);
            }
        }
    }

    /// 0 to 100: how much of the optional context the caller sent (branch, terminal,
    /// cashier, partner session), a quarter each.
    pub fn completeness(&self) -> i32 {
        let given = [
            self.branch_id.is_some(),
            self.terminal_id.is_some(),
            self.cashier_id.is_some(),
            self.partner_session_id.is_some(),
        ];
        25 * given.iter().filter(|g| **g).count() as i32
    }

    /// Only after `validate` passed.
    pub fn parsed(&self) -> ParsedContext {
        ParsedContext {
            merchant_id: Uuid::parse_str(&self.merchant_id).unwrap_or_default(),
            branch_id: self
                .branch_id
                .as_deref()
                .and_then(|b| Uuid::parse_str(b).ok()),
        }
    }
}
