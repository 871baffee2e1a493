//! Answers the router does not give on its own, from the route table: `OPTIONS`
//! answered with `Allow` (and CORS preflights handed to `cors`), `Allow` on every `405`,
//! and a `401` that says which credential the operation takes and what the request
//! presented, so a partner who sent an API key to a JWT route learns why at once.
use std::sync::Arc;

use poem::{
    Endpoint, IntoResponse, Middleware, Request, Response,
    error::{MethodNotAllowedError, ResponseError},
    http::{HeaderValue, Method, StatusCode, header},
};
use serde_json::json;

use crate::error::{ApiError, ErrorCode};

use crate::http::{openapi::route_table::RouteTable, pipeline::cors, pipeline::errors};

pub struct RouterAnswers(pub Arc<RouteTable>);

impl<E: Endpoint> Middleware<E> for RouterAnswers {
    type Output = RouterAnswersEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        RouterAnswersEp {
            inner: ep,
            table: self.0.clone(),
        }
    }
}

pub struct RouterAnswersEp<E> {
    inner: E,
    table: Arc<RouteTable>,
}

impl<E: Endpoint> Endpoint for RouterAnswersEp<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let uri = req.uri().clone();
        let path = uri.path();
        if req.method() == Method::OPTIONS
            && let Some(allow) = self.table.allow(path)
        {
            if cors::is_preflight(&req) {
                return Ok(cors::preflight(&req, &self.table).await);
            }
            return Ok(Response::builder()
                .status(StatusCode::NO_CONTENT)
                .header(header::ALLOW, allow)
                .finish());
        }
        // What a 401 would need, kept cheaply (header values are shared, not copied); the
        // explanation is built only when one happens.
        let presented = Presented::of(&req);
        let method = req.method().clone();
        let browser = cors::Browser::of(&req, &self.table).await?;
        let resp = match self.inner.call(req).await {
            Ok(r) => r.into_response(),
            Err(e) if e.is::<MethodNotAllowedError>() => {
                let mut r = errors::from_poem(&e).as_response();
                if let Some(allow) = self
                    .table
                    .allow(path)
                    .and_then(|a| HeaderValue::from_str(&a).ok())
                {
                    r.headers_mut().insert(header::ALLOW, allow);
                }
                r
            }
            Err(e) => {
                let api = errors::from_poem(&e);
                let api = match self.table.schemes(path, method.as_str()) {
                    Some(schemes) if is_bare_401(&api) => {
                        explain_401(api, schemes, &presented.names())
                    }
                    _ => api,
                };
                api.as_response()
            }
        };
        Ok(browser.finish(resp))
    }
}

fn is_bare_401(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::Coded {
            code: ErrorCode::InvalidApiKey,
            details: None,
            ..
        }
    )
}

/// Which credential headers a request carried.
struct Presented {
    api_key: bool,
    operator_key: bool,
    authorization: Option<HeaderValue>,
}

impl Presented {
    fn of(req: &Request) -> Self {
        let h = req.headers();
        Presented {
            api_key: h.contains_key("x-api-key"),
            operator_key: h.contains_key("x-operator-key"),
            authorization: h.get(header::AUTHORIZATION).cloned(),
        }
    }

    /// By the document's scheme names (an `Authorization` header of another kind is named
    /// by its scheme word).
    fn names(&self) -> Vec<String> {
        let mut out = vec![];
        if self.api_key {
            out.push("ApiKeyAuth".to_string());
        }
        if self.operator_key {
            out.push("OperatorKey".to_string());
        }
        if let Some(v) = &self.authorization {
            out.push(authorization_scheme(v));
        }
        out
    }
}

fn authorization_scheme(v: &HeaderValue) -> String {
    let word = v
        .to_str()
        .ok()
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("");
    if word.eq_ignore_ascii_case("bearer") {
        "PosTerminalJWT".to_string()
    } else {
        // Only the scheme word, never the credential.
        let word: String = word
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(20)
            .collect();
        format!("Authorization: {word}")
    }
}

/// How a scheme is sent, for a partner reading the error.
fn how(scheme: &str) -> &'static str {
    match scheme {
        "ApiKeyAuth" => "an integration API key in the x-api-key header",
        "PosTerminalJWT" => {
            "a terminal JWT from POST /v1/auth/token, as Authorization: Bearer <token>"
        }
        "OperatorKey" => "an operator key in the x-operator-key header",
        _ => "see the operation's security in the OpenAPI document",
    }
}

fn explain_401(e: ApiError, schemes: &[String], presented: &[String]) -> ApiError {
    let expected: Vec<&str> = schemes.iter().map(String::as_str).collect();
    let accepted = presented.iter().any(|p| expected.contains(&p.as_str()));
    let wants = expected
        .iter()
        .map(|s| format!("{s} ({})", how(s)))
        .collect::<Vec<_>>()
        .join(" or ");
    let message = if presented.is_empty() {
        format!("No credential was presented. This operation takes {wants}.")
    } else if accepted {
        format!(
            "The {} presented is invalid, expired or revoked. This operation takes {wants}.",
            presented
                .iter()
                .find(|p| expected.contains(&p.as_str()))
                .map(String::as_str)
                .unwrap_or_default()
        )
    } else {
        format!(
            "This operation does not take {}. It takes {wants}.",
            presented.join(" or ")
        )
    };
    e.with_message(message).with_details(json!({
        "expected_schemes": expected,
        "presented_schemes": presented,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_401_names_the_scheme_wanted_and_the_one_presented() {
        let e = explain_401(
            ApiError::invalid_api_key(),
            &["PosTerminalJWT".to_string()],
            &["ApiKeyAuth".to_string()],
        );
        let ApiError::Coded {
            message, details, ..
        } = e
        else {
            panic!("coded")
        };
        assert!(message.contains("does not take ApiKeyAuth"), "{message}");
        assert!(message.contains("Authorization: Bearer"), "{message}");
        assert_eq!(
            details.unwrap(),
            json!({"expected_schemes": ["PosTerminalJWT"], "presented_schemes": ["ApiKeyAuth"]})
        );
    }

    #[test]
    fn a_credential_is_never_echoed() {
        let req = Request::builder()
            .header("authorization", "Basic c2VjcmV0OnNlY3JldA==")
            .header("x-api-key", "sk_live_secret")
            .finish();
        let p = Presented::of(&req).names();
        assert_eq!(p, ["ApiKeyAuth", "Authorization: Basic"]);
    }
}
