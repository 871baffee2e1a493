//! The terminal heartbeat: a POS checks its clock and its token before a money call.
use chrono::{SecondsFormat, Utc};
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::TerminalJwtAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta},
    pipeline::mutation,
    pipeline::reply::Reply,
};
use crate::{domain::validate::Errors, state::AppState};

pub struct TerminalApi;

#[derive(Object, Deserialize, Debug, Clone)]
pub struct HeartbeatRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
}

impl Validate for HeartbeatRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
    }
}

/// The server's view of the terminal's session.
#[derive(Object, Serialize)]
pub struct Heartbeat {
    /// Compare with the terminal's clock.
    pub server_time: String,
    pub token_expires_at: String,
    /// Re-exchange the token before a money call when this is low.
    pub token_ttl_seconds: i64,
    pub merchant_id: String,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    /// The cashier signed into the token.
    #[oai(nullable)]
    pub cashier_id: Option<String>,
    /// The terminal signed into the token.
    #[oai(nullable)]
    pub terminal_id: Option<String>,
}

#[OpenApi(tag = "Tag::Platform")]
impl TerminalApi {
    /// Terminal heartbeat
    ///
    /// Read-shaped (changes nothing; the Idempotency-Key header is optional): checks the
    /// terminal's token and context and returns the server time and the token's remaining
    /// lifetime.
    #[oai(
        path = "/terminal/heartbeat",
        method = "post",
        operation_id = "terminalHeartbeat"
    )]
    async fn heartbeat(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        body: JsonBody<HeartbeatRequest>,
    ) -> poem::Result<Reply<Heartbeat>> {
        let acting = mutation::authorize(state.0, &auth.0, &body.value.context).await?;
        let now = Utc::now();
        let expires = auth.0.expires_at.unwrap_or(now);
        Ok(Reply::ok(&Heartbeat {
            server_time: now.to_rfc3339_opts(SecondsFormat::Millis, true),
            token_expires_at: expires.to_rfc3339_opts(SecondsFormat::Secs, true),
            token_ttl_seconds: (expires - now).num_seconds().max(0),
            merchant_id: acting.merchant_id.to_string(),
            branch_id: acting.branch_id.map(|b| b.to_string()),
            cashier_id: acting.cashier_id,
            terminal_id: acting.terminal_id,
        }))
    }
}
