//! The two credentials of the contract as poem-openapi security schemes, each resolving to
//! a `Principal`. A missing or bad credential of either kind is 401 INVALID_API_KEY.
use poem::Request;
use poem_openapi::{
    SecurityScheme,
    auth::{ApiKey, Bearer},
};

use std::sync::Arc;

use crate::{
    domain::credentials::Principal,
    error::ApiError,
    idempotency::{Fetched, Presented},
    infra::current_request,
    state::AppState,
};

fn state(req: &Request) -> Result<&AppState, ApiError> {
    req.data::<AppState>()
        .ok_or_else(|| ApiError::internal("AppState missing from the request"))
}

/// Platform API key, sent in the `x-api-key` header (never in a body or query string).
#[derive(SecurityScheme)]
#[oai(
    rename = "ApiKeyAuth",
    ty = "api_key",
    key_name = "x-api-key",
    key_in = "header",
    checker = "api_key_checker"
)]
pub struct ApiKeyAuth(pub Principal);

/// The principal of the request's API key, already found in the key cache by an outer
/// layer (`early_replay`) of this same request.
#[derive(Clone)]
pub struct KeyPrincipal(pub Principal);

async fn api_key_checker(req: &Request, key: ApiKey) -> poem::Result<Principal> {
    let st = state(req)?;
    let p = match req.extensions().get() {
        Some(KeyPrincipal(p)) => p.clone(),
        None => {
            // A mutation's Idempotency-Key, parsed by the early replay: the response copy a
            // retry would replay comes in the same round trip as the principal.
            let presented = req.extensions().get::<Arc<Presented>>();
            let (p, copy) = st
                .key_auth()
                .authenticate(&key.key, presented.and_then(|k| k.well_formed()))
                .await?;
            if let Some(presented) = presented {
                presented.remember(Fetched {
                    credential_fingerprint: Some(copy.credential_fingerprint),
                    copy: copy.copy,
                    request_digest: None,
                });
            }
            p
        }
    };
    let p = with_clock(st, p).await?;
    current_request::set_caller(p.integration_id);
    Ok(p)
}

/// A sandbox principal learns its integration's test clock (a live one runs on real time:
/// nothing to read). Not cached with the key: an advance reaches the next request.
async fn with_clock(st: &AppState, mut p: Principal) -> Result<Principal, ApiError> {
    if p.is_sandbox && p.clock.is_none() {
        p.clock = Some(st.standing().clock(p.integration_id).await?);
    }
    Ok(p)
}

/// POS terminal JWT (HS256, 600 s) minted by `POST /v1/auth/token`, sent as
/// `Authorization: Bearer <token>`.
#[derive(SecurityScheme)]
#[oai(
    rename = "PosTerminalJWT",
    ty = "bearer",
    bearer_format = "JWT",
    checker = "jwt_checker"
)]
pub struct TerminalJwtAuth(pub Principal);

async fn jwt_checker(req: &Request, bearer: Bearer) -> poem::Result<Principal> {
    let st = state(req)?;
    let claims = st
        .jwt
        .verify(&bearer.token)
        .map_err(|_| ApiError::invalid_api_key())?;
    // A token outlives nothing its integration's suspension ended (see `standing`).
    // The same read says what time the integration's rules run at.
    let clock = st.standing().require_active(claims.integration_id).await?;
    current_request::set_caller(claims.integration_id);
    Ok(Principal {
        clock: Some(clock),
        ..claims.principal()
    })
}

/// Either credential. The JWT is tried first, so an API-key caller's own error (for
/// example a retryable 503 while Redis is down) is the one reported.
#[derive(SecurityScheme)]
pub enum AnyAuth {
    Jwt(TerminalJwtAuth),
    ApiKey(ApiKeyAuth),
}

impl AnyAuth {
    pub fn principal(&self) -> &Principal {
        match self {
            AnyAuth::Jwt(j) => &j.0,
            AnyAuth::ApiKey(k) => &k.0,
        }
    }
}

impl AnyAuth {
    /// 403 FORBIDDEN naming `p` unless the credential holds it (a terminal JWT holds
    /// `terminal`).
    pub fn require(&self, p: crate::domain::credentials::Permission) -> Result<(), ApiError> {
        self.principal().require(p)
    }
}
