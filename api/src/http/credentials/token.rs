//! Terminal tokens: exchange an API key for a short-lived JWT, and check a JWT.
use chrono::{TimeZone, Utc};
use poem::web::{Data, RemoteAddr};
use poem_openapi::{Object, OpenApi, SecurityScheme, auth::Bearer};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::pipeline::common::ts;
use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::{jwt, token},
        validate::Errors,
    },
    envelope,
    idempotency::Outcome,
    infra::ratelimit,
    state::AppState,
};

pub struct TokenApi;

/// Exchange the API key (header only) for a terminal JWT.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct TokenRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The cashier signed into the token (up to 64 characters, no control characters);
    /// only a cashier in a token is trusted. Null, absent or `""`: no cashier.
    #[oai(nullable)]
    #[serde(
        default,
        deserialize_with = "crate::http::pipeline::common::empty_as_none"
    )]
    pub cashier_id: Option<crate::http::pipeline::fields::Text<1, 64>>,
}

impl Validate for TokenRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if let Some(c) = &self.cashier_id {
            c.check(e, "/cashier_id");
        }
    }
}

/// What a token acts for.
#[derive(Object, Serialize, Clone)]
pub struct TokenScope {
    pub integration_id: String,
    pub enterprise_id: String,
    #[oai(nullable)]
    pub brand_id: Option<String>,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    #[oai(nullable)]
    pub cashier_id: Option<String>,
    /// The terminal signed into the token (`context.terminal_id` of the exchange): its
    /// failed credentials are counted against it, and a payment records it whatever the
    /// request context says.
    #[oai(nullable)]
    pub terminal_id: Option<String>,
}

/// A terminal token.
#[derive(Object, Serialize)]
pub struct PosTerminalToken {
    /// Compact JWT (HS256).
    pub token: String,
    /// Always `Bearer`.
    pub token_type: String,
    /// Seconds until expiry: 600.
    pub expires_in: i64,
    pub expires_at: String,
    pub scope: TokenScope,
    /// Mirrors the key's sandbox flag.
    pub sandbox: bool,
}

/// Whether a token is valid. HTTP 200 either way.
#[derive(Object, Serialize)]
pub struct TokenValidation {
    pub valid: bool,
    /// When valid: the absolute expiry.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When valid: seconds left.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<bool>,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<TokenScope>,
    /// When not valid: `expired`, `malformed`, `wrong_audience` or `bad_signature`.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Any bearer token, valid or not: validation reports on it instead of refusing it.
#[derive(SecurityScheme)]
#[oai(
    rename = "PosTerminalJWT",
    ty = "bearer",
    bearer_format = "JWT",
    checker = "any_bearer"
)]
pub struct PresentedBearer(String);

async fn any_bearer(_req: &poem::Request, b: Bearer) -> Option<String> {
    Some(b.token)
}

fn scope_of(c: &jwt::Claims) -> TokenScope {
    TokenScope {
        integration_id: c.integration_id.to_string(),
        enterprise_id: c.enterprise_id.to_string(),
        brand_id: c.brand_id.map(|u| u.to_string()),
        branch_id: c.branch_id.map(|u| u.to_string()),
        cashier_id: c.cashier_id.clone(),
        terminal_id: c.terminal_id.clone(),
    }
}

#[OpenApi(tag = "Tag::Auth")]
impl TokenApi {
    /// Exchange an API key for a terminal token
    ///
    /// Mints an HS256 JWT (600 s) from the `x-api-key` header (never the body), narrowed to
    /// `context.merchant_id` and `context.branch_id`. `context.terminal_id` is signed into
    /// the token: failed credentials are counted against that terminal (see Risk controls),
    /// and a token without one counts against its API key. A retry with the same
    /// Idempotency-Key while the token is valid returns the same token.
    ///
    /// Permission: `terminal`.
    #[oai(
        path = "/auth/token",
        method = "post",
        operation_id = "exchangeTerminalToken"
    )]
    async fn exchange(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        #[oai(name = "Idempotency-Key")] key: Idempotent<'_>,
        body: JsonBody<TokenRequest>,
    ) -> poem::Result<Reply<PosTerminalToken>> {
        auth.0.require(Permission::Terminal)?;
        let st = state.0;
        let shared = st.clone();
        let principal = auth.0.clone();
        let cashier = body.value.cashier_id.clone().map(String::from);
        let terminal = body.value.context.terminal_id.clone().map(String::from);
        key.ttl(chrono::Duration::seconds(jwt::TTL_SECS))
            .run(&auth.0, &body, async move |txn, acting| {
                let (token, c) =
                    token::mint(txn, &shared.jwt, &principal, &acting, cashier, terminal).await?;
                Ok(Outcome {
                    data: PosTerminalToken {
                        token: token.clone(),
                        token_type: "Bearer".into(),
                        expires_in: c.exp - c.iat,
                        expires_at: ts(c.expires_at()),
                        scope: scope_of(&c),
                        sandbox: c.sandbox,
                    },
                    // A bearer credential: the stored replay keeps it sealed.
                    secrets: vec![token],
                    meta: Default::default(),
                    status: 200,
                })
            })
            .await
    }

    /// Check a terminal token
    ///
    /// HTTP 200 for valid and invalid tokens alike; only a missing bearer token is 401.
    /// Read-only (never extends a token) and rate-limited per integration.
    #[oai(
        path = "/auth/token/validate",
        method = "get",
        operation_id = "validateTerminalToken"
    )]
    async fn validate(
        &self,
        state: Data<&AppState>,
        remote: &RemoteAddr,
        bearer: PresentedBearer,
    ) -> poem::Result<Reply<TokenValidation>> {
        let st = state.0;
        let verdict = st.jwt.verify(&bearer.0);
        // A token that does not verify names no integration we can trust: limit its
        // sender by address instead.
        let (bucket, sandbox) = match &verdict {
            Ok(c) => (format!("validate:{}", c.integration_id), c.sandbox),
            Err(_) => {
                let ip = crate::infra::current_request::client_address(remote);
                (format!("validate:anon:{ip}"), false)
            }
        };
        let rate = ratelimit::check(&st.kv, &st.config, &bucket, sandbox).await?;
        let body = match verdict {
            Ok(c) => {
                let exp = Utc
                    .timestamp_opt(c.exp, 0)
                    .single()
                    .unwrap_or_else(Utc::now);
                TokenValidation {
                    valid: true,
                    expires_at: Some(ts(exp)),
                    ttl_seconds: Some((c.exp - Utc::now().timestamp()).max(0)),
                    sandbox: Some(c.sandbox),
                    scope: Some(scope_of(&c)),
                    reason: None,
                }
            }
            Err(reason) => TokenValidation {
                valid: false,
                expires_at: None,
                ttl_seconds: None,
                sandbox: None,
                scope: None,
                reason: Some(
                    serde_json::to_value(reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                ),
            },
        };
        Ok(Reply::rendered(envelope::ok(&body).with_rate(rate)))
    }
}
