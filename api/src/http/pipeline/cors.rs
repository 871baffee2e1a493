//! CORS at the edge (the policy is `domain::platform::cors`): a preflight for a terminal-JWT
//! operation is answered for an origin some integration lists, and a browser's request is
//! served only when the caller's own integration lists its origin; it is refused with
//! 403 FORBIDDEN before the operation runs otherwise, so a browser never moves money whose
//! answer it could not read. Requests without an `Origin`, or from the API's own origin
//! (the docs page), are none of this layer's business.
use poem::{
    Request, Response,
    http::{HeaderValue, Method, StatusCode, header},
};

use crate::{error::ApiError, state::AppState};

use crate::http::openapi::route_table::RouteTable;

/// The scheme a browser may hold: short-lived, minted per terminal.
const BROWSER_SCHEME: &str = "PosTerminalJWT";
/// What a browser may send besides the CORS-safelisted headers.
const ALLOW_HEADERS: &str = "authorization, content-type, idempotency-key, x-request-id";
/// What a browser may read besides the CORS-safelisted response headers.
const EXPOSE_HEADERS: &str = "x-request-id, idempotency-replayed, retry-after, \
x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset";
const MAX_AGE_SECS: &str = "600";

pub fn is_preflight(req: &Request) -> bool {
    req.method() == Method::OPTIONS
        && req.headers().contains_key(header::ORIGIN)
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The `Origin` of a cross-origin request (one whose origin is not this host's).
fn cross_origin(req: &Request) -> Option<String> {
    let origin = req.headers().get(header::ORIGIN)?.to_str().ok()?;
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let same = host.is_some_and(|h| {
        origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(h))
    });
    (!same).then(|| origin.to_string())
}

fn browser_may_call(table: &RouteTable, path: &str, method: &str) -> bool {
    table
        .schemes(path, method)
        .is_some_and(|s| s.iter().any(|s| s == BROWSER_SCHEME))
}

/// 204 with `Allow`; with the CORS grant when the origin is listed by some integration and
/// the requested method takes a terminal JWT.
pub async fn preflight(req: &Request, table: &RouteTable) -> Response {
    let path = req.uri().path();
    let mut b = Response::builder()
        .status(StatusCode::NO_CONTENT)
        .header(header::VARY, "Origin, Access-Control-Request-Method");
    if let Some(allow) = table.allow(path) {
        b = b.header(header::ALLOW, allow);
    }
    let asked = req
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_uppercase();
    let Some(origin) = cross_origin(req) else {
        return b.finish();
    };
    let listed = match req.data::<AppState>() {
        Some(st) if browser_may_call(table, path, &asked) => st
            .cors_origins()
            .await
            .map(|c| c.listed(&origin))
            // Not knowing is not a grant: the browser retries the preflight.
            .unwrap_or(false),
        _ => false,
    };
    if !listed {
        return b.finish();
    }
    b.header(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin)
        .header(header::ACCESS_CONTROL_ALLOW_METHODS, asked)
        .header(header::ACCESS_CONTROL_ALLOW_HEADERS, ALLOW_HEADERS)
        .header(header::ACCESS_CONTROL_MAX_AGE, MAX_AGE_SECS)
        .finish()
}

/// A request's standing as a browser call, decided before the operation runs.
pub enum Browser {
    /// Not a cross-origin call, or one this layer leaves to the operation's own 401.
    None,
    /// Served to this origin.
    Allowed(HeaderValue),
}

impl Browser {
    pub async fn of(req: &Request, table: &RouteTable) -> Result<Browser, ApiError> {
        let Some(origin) = cross_origin(req) else {
            return Ok(Browser::None);
        };
        let path = req.uri().path();
        let refuse = || {
            ApiError::forbidden(format!(
                "Browser calls from {origin} are not allowed for this integration. An operator lists an integration's origins (POST /v1/operator/integrations/{{integration_id}}/cors-origins); only operations that take a terminal JWT are offered to a browser."
            ))
        };
        if !browser_may_call(table, path, req.method().as_str()) {
            // Unreachable from a browser (its preflight was not granted) unless the origin
            // is forged by a server-side client, which the credential check still governs.
            return Ok(Browser::None);
        }
        let (Some(st), Some(token)) = (req.data::<AppState>(), bearer(req)) else {
            return Ok(Browser::None);
        };
        let Ok(claims) = st.jwt.verify(token) else {
            return Ok(Browser::None); // the operation answers 401
        };
        if !st
            .cors_origins()
            .await?
            .allows(claims.integration_id, &origin)
        {
            return Err(refuse());
        }
        Ok(HeaderValue::from_str(&origin)
            .map(Browser::Allowed)
            .unwrap_or(Browser::None))
    }

    pub fn finish(self, mut resp: Response) -> Response {
        if let Browser::Allowed(origin) = self {
            let h = resp.headers_mut();
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            h.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSE_HEADERS),
            );
            h.append(header::VARY, HeaderValue::from_static("Origin"));
        }
        resp
    }
}

fn bearer(req: &Request) -> Option<&str> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (word, token) = v.split_once(' ')?;
    word.eq_ignore_ascii_case("bearer").then(|| token.trim())
}
