//! Every failure leaves as the envelope with a spec code, including the ones the framework
//! raises before a handler runs.
use poem::{
    Response,
    error::{MethodNotAllowedError, NotFoundError, ReadBodyError, ResponseError, SizedLimitError},
    http::{HeaderValue, StatusCode},
};
use poem_openapi::error::{
    AuthorizationError, ContentTypeError, ParseParamError, ParsePathError, ParseRequestPayloadError,
};

use crate::{
    envelope::{self, Rendered},
    error::{ApiError, ErrorCode},
};

impl ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        StatusCode::from_u16(ApiError::status(self)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn as_response(&self) -> Response {
        match self {
            ApiError::Internal(cause) => tracing::error!(%cause, "internal error"),
            ApiError::Unavailable { subsystem, cause } => {
                tracing::warn!(subsystem = subsystem.as_str(), %cause, "dependency unavailable")
            }
            ApiError::Coded { .. } => {}
        }
        to_response(envelope::error(self))
    }
}

/// Builds the HTTP response of a rendered envelope.
pub fn to_response(r: Rendered) -> Response {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .content_type("application/json; charset=utf-8");
    if let Some(s) = r.retry_after {
        b = b.header("Retry-After", s.to_string());
    }
    if r.replayed {
        b = b.header("Idempotency-Replayed", HeaderValue::from_static("true"));
    }
    if let Some(rate) = r.rate {
        b = b
            .header("X-RateLimit-Limit", rate.limit.to_string())
            .header("X-RateLimit-Remaining", rate.remaining.to_string())
            .header("X-RateLimit-Reset", rate.reset_secs.to_string());
    }
    b.body(r.body)
}

/// Maps whatever a poem or poem-openapi layer raised to our error. Nothing falls through:
/// an unrecognised error is INTERNAL_SERVER_ERROR (logged, never echoed).
pub fn from_poem(err: &poem::Error) -> ApiError {
    if let Some(e) = err.downcast_ref::<ApiError>() {
        return clone_api_error(e);
    }
    if err.is::<NotFoundError>() {
        return ApiError::new(ErrorCode::NotFound, "No such path.");
    }
    if err.is::<MethodNotAllowedError>() {
        return ApiError::new(
            ErrorCode::NotFound,
            "This path does not accept this HTTP method.",
        )
        .with_status(405);
    }
    if let Some(e) = err.downcast_ref::<ParseRequestPayloadError>() {
        return ApiError::field(
            "/",
            "malformed_json",
            format!("the body is not valid JSON: {}", e.reason),
        );
    }
    if let Some(e) = err.downcast_ref::<ContentTypeError>() {
        let message = match e {
            ContentTypeError::NotSupported { content_type } => {
                format!("content type {content_type} is not supported; send application/json")
            }
            _ => "a Content-Type of application/json is required".to_string(),
        };
        return ApiError::field("header:Content-Type", "unsupported_media_type", message)
            .with_status(415);
    }
    if let Some(e) = err.downcast_ref::<ParseParamError>() {
        return ApiError::field(param_field(e.name), "invalid_parameter", e.reason.clone());
    }
    if let Some(e) = err.downcast_ref::<ParsePathError>() {
        // poem-openapi names path parameters param0, param1 ...: say which part of the path.
        return ApiError::field("path", "invalid_parameter", e.to_string());
    }
    if err.is::<AuthorizationError>() {
        return ApiError::invalid_api_key();
    }
    let too_large = matches!(
        err.downcast_ref::<ReadBodyError>(),
        Some(ReadBodyError::PayloadTooLarge)
    ) || matches!(
        err.downcast_ref::<SizedLimitError>(),
        Some(SizedLimitError::PayloadTooLarge)
    );
    if too_large {
        return ApiError::field("/", "too_large", "the request body exceeds the size limit")
            .with_status(413);
    }
    let status = err.status();
    if status.is_client_error() {
        return refusal(status, err);
    }
    ApiError::internal(format!("unmapped framework error ({status}): {err}"))
}

/// Any other rejection an extractor raised before a handler ran (a console form posted as
/// JSON or multipart, say) is the client's error, answered with the framework's own 4xx:
/// never a 500, which anyone who can reach a route could otherwise raise at will (and with
/// it the 5xx-ratio alert).
fn refusal(status: StatusCode, err: &poem::Error) -> ApiError {
    let code = match status {
        StatusCode::UNAUTHORIZED => return ApiError::invalid_api_key(),
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => ErrorCode::NotFound,
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimited,
        _ => {
            let issue = match status {
                StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
                StatusCode::PAYLOAD_TOO_LARGE => "too_large",
                _ => "invalid_request",
            };
            return ApiError::field("/", issue, err.to_string()).with_status(status.as_u16());
        }
    };
    ApiError::new(code, err.to_string()).with_status(status.as_u16())
}

/// Headers are the parameters with a hyphen (`Idempotency-Key`); the rest are queries.
fn param_field(name: &str) -> String {
    if name.contains('-') {
        format!("header:{name}")
    } else {
        format!("query:{name}")
    }
}

fn clone_api_error(e: &ApiError) -> ApiError {
    match e {
        ApiError::Coded {
            code,
            message,
            details,
            status,
            retry_after,
            rate,
            decision_trace_id,
        } => ApiError::Coded {
            code: *code,
            message: message.clone(),
            details: details.clone(),
            status: *status,
            retry_after: *retry_after,
            rate: rate.clone(),
            decision_trace_id: decision_trace_id.clone(),
        },
        ApiError::Unavailable { subsystem, cause } => ApiError::Unavailable {
            subsystem: *subsystem,
            cause: cause.clone(),
        },
        ApiError::Internal(c) => ApiError::Internal(c.clone()),
    }
}
