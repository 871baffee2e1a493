//! `ApiError`: the spec's error codes, their HTTP status and their `details`.
//!
//! Every failure a caller can see is one of these codes; clients branch on `code`, the
//! status is a coarse hint. 5xx errors never carry internals: the cause is logged with the
//! request id and the caller gets a generic message.
use serde::Serialize;
use serde_json::{Value, json};

/// What the `X-RateLimit-*` headers say (a RATE_LIMITED error carries it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RateLimitInfo {
    pub limit: u64,
    pub remaining: u64,
    /// Seconds until the full limit is available again.
    pub reset_secs: u64,
    pub window_secs: u64,
}

/// The catalogue of error codes, exactly as the spec's Errors table names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
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
    /// Receiver-side only: a webhook delivery whose signature or timestamp fails.
    InvalidSignature,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::InvalidApiKey,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::ValidationError,
        ErrorCode::InsufficientFunds,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::Conflict,
        ErrorCode::RateLimited,
        ErrorCode::CurrencyNotSupported,
        ErrorCode::WalletProgramAmbiguous,
        ErrorCode::CredentialTypeUnsupported,
        ErrorCode::RequiresDynamicCredential,
        ErrorCode::InternalServerError,
        ErrorCode::OtpExpired,
        ErrorCode::OtpInvalid,
        ErrorCode::CredentialExpiredOrReplayed,
        ErrorCode::InvalidSignature,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidApiKey => "INVALID_API_KEY",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::ValidationError => "VALIDATION_ERROR",
            ErrorCode::InsufficientFunds => "INSUFFICIENT_FUNDS",
            ErrorCode::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::CurrencyNotSupported => "CURRENCY_NOT_SUPPORTED",
            ErrorCode::WalletProgramAmbiguous => "WALLET_PROGRAM_AMBIGUOUS",
            ErrorCode::CredentialTypeUnsupported => "CREDENTIAL_TYPE_UNSUPPORTED",
            ErrorCode::RequiresDynamicCredential => "REQUIRES_DYNAMIC_CREDENTIAL",
            ErrorCode::InternalServerError => "INTERNAL_SERVER_ERROR",
            ErrorCode::OtpExpired => "OTP_EXPIRED",
            ErrorCode::OtpInvalid => "OTP_INVALID",
            ErrorCode::CredentialExpiredOrReplayed => "CREDENTIAL_EXPIRED_OR_REPLAYED",
            ErrorCode::InvalidSignature => "INVALID_SIGNATURE",
        }
    }

    /// The status the spec's table gives the code.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::InvalidApiKey => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::ValidationError => 400,
            ErrorCode::InsufficientFunds => 402,
            ErrorCode::IdempotencyKeyReused => 422,
            ErrorCode::Conflict => 409,
            ErrorCode::RateLimited => 429,
            ErrorCode::CurrencyNotSupported
            | ErrorCode::WalletProgramAmbiguous
            | ErrorCode::CredentialTypeUnsupported
            | ErrorCode::RequiresDynamicCredential => 422,
            ErrorCode::InternalServerError => 500,
            ErrorCode::OtpExpired
            | ErrorCode::OtpInvalid
            | ErrorCode::CredentialExpiredOrReplayed
            | ErrorCode::InvalidSignature => 400,
        }
    }
}

/// One problem with one input field. `field` is a JSON-pointer-like path into the body
/// (`/amount_minor`, `/basket/lines/0/sku`), or a header / query / path parameter name
/// prefixed with its location (`header:Idempotency-Key`, `query:limit`, `path:keyId`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    /// A stable machine-readable reason: required, must_be_integer, invalid_uuid, too_long ...
    pub issue: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, issue: &str, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            issue: issue.to_string(),
            message: message.into(),
        }
    }
}

/// Which shared dependency failed, for a retryable 503.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subsystem {
    Database,
    Redis,
    Queue,
    /// The request ran past `WALLET_REQUEST_TIMEOUT_MS`, waiting on one of the others.
    Deadline,
    /// The service sheds load: too many requests are running or waiting in this process.
    Capacity,
}

impl Subsystem {
    pub fn as_str(self) -> &'static str {
        match self {
            Subsystem::Database => "database",
            Subsystem::Redis => "redis",
            Subsystem::Queue => "queue",
            Subsystem::Deadline => "deadline",
            Subsystem::Capacity => "capacity",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{code:?}: {message}")]
    Coded {
        code: ErrorCode,
        message: String,
        details: Option<Value>,
        /// Overrides the code's table status where a more precise one helps (405, 413, 415).
        status: Option<u16>,
        /// Seconds, sent as `Retry-After`.
        retry_after: Option<u64>,
        /// Sent as the `X-RateLimit-*` headers. Boxed, as the trace id is: errors travel in
        /// every `Result`, and most carry neither.
        rate: Option<Box<RateLimitInfo>>,
        /// Sent as `meta.decision_trace_id`: the decision (a payment) this refuses.
        decision_trace_id: Option<Box<str>>,
    },
    /// A shared dependency is down or too slow. Sent as 503 with code INTERNAL_SERVER_ERROR,
    /// which the spec makes retryable with the same Idempotency-Key.
    #[error("{subsystem:?} unavailable: {cause}")]
    Unavailable { subsystem: Subsystem, cause: String },
    /// Anything unexpected. The cause is logged, never sent.
    #[error("internal: {0}")]
    Internal(String),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError::Coded {
            code,
            message: message.into(),
            details: None,
            status: None,
            retry_after: None,
            decision_trace_id: None,
            rate: None,
        }
    }

    /// Names the decision (a payment) this refuses, for `meta.decision_trace_id`.
    pub fn with_decision_trace(mut self, id: &str) -> Self {
        if let ApiError::Coded {
            decision_trace_id, ..
        } = &mut self
        {
            *decision_trace_id = Some(id.into());
        }
        self
    }

    pub fn decision_trace_id(&self) -> Option<&str> {
        match self {
            ApiError::Coded {
                decision_trace_id, ..
            } => decision_trace_id.as_deref(),
            _ => None,
        }
    }

    /// The details, if any.
    pub fn details(&self) -> Option<&Value> {
        match self {
            ApiError::Coded { details, .. } => details.as_ref(),
            _ => None,
        }
    }

    /// Adds `key` to the details (an object), keeping what they hold.
    pub fn with_detail(mut self, key: &str, v: Value) -> Self {
        if let ApiError::Coded { details, .. } = &mut self {
            let mut d = details.take().unwrap_or_else(|| serde_json::json!({}));
            if let Some(o) = d.as_object_mut() {
                o.insert(key.to_string(), v);
            }
            *details = Some(d);
        }
        self
    }

    pub fn with_details(mut self, d: Value) -> Self {
        if let ApiError::Coded { details, .. } = &mut self {
            *details = Some(d);
        }
        self
    }

    pub fn with_message(mut self, m: impl Into<String>) -> Self {
        if let ApiError::Coded { message, .. } = &mut self {
            *message = m.into();
        }
        self
    }

    pub fn with_status(mut self, s: u16) -> Self {
        if let ApiError::Coded { status, .. } = &mut self {
            *status = Some(s);
        }
        self
    }

    pub fn invalid_api_key() -> Self {
        Self::new(ErrorCode::InvalidApiKey, "Missing or invalid credentials.")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} not found."))
    }

    pub fn validation(fields: Vec<FieldError>) -> Self {
        let message = match fields.as_slice() {
            [one] => format!("{}: {}", one.field, one.message),
            _ => format!("{} fields are invalid.", fields.len()),
        };
        Self::new(ErrorCode::ValidationError, message).with_details(json!({ "fields": fields }))
    }

    /// The field problems of a VALIDATION_ERROR (empty for any other error).
    pub fn field_errors(&self) -> Vec<FieldError> {
        let ApiError::Coded {
            details: Some(d), ..
        } = self
        else {
            return vec![];
        };
        d["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                FieldError::new(
                    f["field"].as_str().unwrap_or("?"),
                    f["issue"].as_str().unwrap_or("invalid"),
                    f["message"].as_str().unwrap_or("invalid"),
                )
            })
            .collect()
    }

    pub fn field(field: impl Into<String>, issue: &str, message: impl Into<String>) -> Self {
        Self::validation(vec![FieldError::new(field, issue, message)])
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }

    pub fn idempotency_key_reused() -> Self {
        Self::new(
            ErrorCode::IdempotencyKeyReused,
            "This Idempotency-Key was already used with a different request.",
        )
    }

    pub fn rate_limited(info: RateLimitInfo, retry_after: u64) -> Self {
        ApiError::Coded {
            code: ErrorCode::RateLimited,
            message: "Too many requests; retry after the Retry-After seconds with the same key."
                .into(),
            details: Some(json!({
                "limit": info.limit,
                "window_seconds": info.window_secs,
                "remaining": info.remaining,
                "reset_seconds": info.reset_secs,
                "retry_after_seconds": retry_after,
            })),
            status: None,
            retry_after: Some(retry_after),
            rate: Some(Box::new(info)),
            decision_trace_id: None,
        }
    }

    pub fn rate(&self) -> Option<RateLimitInfo> {
        match self {
            ApiError::Coded { rate, .. } => rate.as_deref().copied(),
            _ => None,
        }
    }

    pub fn currency_not_supported(supported: &[String]) -> Self {
        Self::new(
            ErrorCode::CurrencyNotSupported,
            "No active wallet program for this currency.",
        )
        .with_details(json!({ "supported": supported }))
    }

    pub fn wallet_program_ambiguous(candidates: &[String]) -> Self {
        Self::new(
            ErrorCode::WalletProgramAmbiguous,
            "The customer belongs to more than one active program; pass wallet_program_id.",
        )
        .with_details(json!({ "candidates": candidates }))
    }

    pub fn credential_type_unsupported(supported: &[String]) -> Self {
        Self::new(
            ErrorCode::CredentialTypeUnsupported,
            "This credential type is not enabled for the integration.",
        )
        .with_details(json!({ "supported": supported }))
    }

    /// A payment presented a static identifier (`presented`); `accepted` are the dynamic
    /// credential types that would do.
    pub fn requires_dynamic_credential(presented: &str, accepted: &[String]) -> Self {
        Self::new(
            ErrorCode::RequiresDynamicCredential,
            "A payment needs a dynamic credential (an OTP, a QR nonce or a short code), not a static identifier of the customer.",
        )
        .with_details(json!({ "presented": presented, "accepted": accepted }))
    }

    pub fn insufficient_funds(
        shortfall_minor: i64,
        available_actual_minor: i64,
        available_promo_minor: i64,
        currency: &str,
    ) -> Self {
        Self::new(
            ErrorCode::InsufficientFunds,
            "Actual plus released promotional balance cannot cover the amount.",
        )
        .with_details(json!({
            "shortfall_minor": shortfall_minor,
            "available_actual_minor": available_actual_minor,
            "available_promo_minor": available_promo_minor,
            "currency": currency,
        }))
    }

    pub fn internal(cause: impl std::fmt::Display) -> Self {
        ApiError::Internal(cause.to_string())
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Coded { code, .. } => *code,
            _ => ErrorCode::InternalServerError,
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::Coded { code, status, .. } => status.unwrap_or(code.status()),
            ApiError::Unavailable { .. } => 503,
            ApiError::Internal(_) => 500,
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Coded { retry_after, .. } => *retry_after,
            ApiError::Unavailable { .. } => Some(1),
            ApiError::Internal(_) => None,
        }
    }

    /// The `error` object of the envelope. Internals never leave the process.
    pub fn to_body(&self) -> Value {
        match self {
            ApiError::Coded {
                code,
                message,
                details,
                ..
            } => {
                let mut e = json!({ "code": code.as_str(), "message": message });
                if let Some(d) = details {
                    e["details"] = d.clone();
                }
                e
            }
            ApiError::Unavailable { subsystem, .. } => json!({
                "code": ErrorCode::InternalServerError.as_str(),
                "message": "A dependency is temporarily unavailable. Retry with the same Idempotency-Key.",
                "details": { "subsystem": subsystem.as_str(), "retryable": true },
            }),
            ApiError::Internal(_) => json!({
                "code": ErrorCode::InternalServerError.as_str(),
                "message": "Internal error. Retry with the same Idempotency-Key.",
                "details": { "retryable": true },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_the_status_of_the_spec_table() {
        let expected = [
            ("INVALID_API_KEY", 401),
            ("FORBIDDEN", 403),
            ("NOT_FOUND", 404),
            ("VALIDATION_ERROR", 400),
            ("INSUFFICIENT_FUNDS", 402),
            ("IDEMPOTENCY_KEY_REUSED", 422),
            ("CONFLICT", 409),
            ("RATE_LIMITED", 429),
            ("CURRENCY_NOT_SUPPORTED", 422),
            ("WALLET_PROGRAM_AMBIGUOUS", 422),
            ("CREDENTIAL_TYPE_UNSUPPORTED", 422),
            ("REQUIRES_DYNAMIC_CREDENTIAL", 422),
            ("INTERNAL_SERVER_ERROR", 500),
            ("OTP_EXPIRED", 400),
            ("OTP_INVALID", 400),
            ("CREDENTIAL_EXPIRED_OR_REPLAYED", 400),
        ];
        for (name, status) in expected {
            let code = ErrorCode::ALL
                .iter()
                .find(|c| c.as_str() == name)
                .unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(code.status(), status, "{name}");
        }
    }

    #[test]
    fn internal_errors_never_expose_their_cause() {
        let body = ApiError::internal("password=hunter2 at db.rs:12").to_body();
        assert!(!body.to_string().contains("hunter2"));
        assert_eq!(body["code"], "INTERNAL_SERVER_ERROR");
    }

    #[test]
    fn insufficient_funds_carries_the_spec_details() {
        let d = ApiError::insufficient_funds(50, 20, 30, "EUR").to_body();
        assert_eq!(d["details"]["shortfall_minor"], 50);
        assert_eq!(d["details"]["available_actual_minor"], 20);
        assert_eq!(d["details"]["available_promo_minor"], 30);
        assert_eq!(d["details"]["currency"], "EUR");
    }
}
