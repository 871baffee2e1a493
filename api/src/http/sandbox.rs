//! The sandbox SMS inbox: what the mock provider "sent" to a phone.
use poem_openapi::{Object, OpenApi, param::Query};
use serde::Serialize;

use super::{auth::ApiKeyAuth, reply::Reply, tags::Tag};
use crate::domain::credentials::Permission;
use crate::{domain::validate, error::ApiError, state::AppState, store};

pub struct SandboxApi;

/// A message the mock SMS provider accepted.
#[derive(Object, Serialize)]
pub struct SandboxMessage {
    pub message_id: String,
    /// `otp` or `enrollment`.
    pub kind: String,
    pub phone: String,
    /// The code the customer would read, where the message carries one.
    #[oai(nullable)]
    pub code: Option<String>,
    /// The signed link token, for enrollment messages.
    #[oai(nullable)]
    pub verification_token: Option<String>,
    pub body: String,
    pub sent_at: String,
    #[oai(nullable)]
    pub merchant_id: Option<String>,
}

#[OpenApi(tag = "Tag::Platform")]
impl SandboxApi {
    /// Sandbox SMS inbox
    ///
    /// Messages the mock provider received for a phone number, newest first. Sandbox keys
    /// only: a production key gets NOT_FOUND. Numbers starting with `+9990` make the mock
    /// provider fail every attempt, to exercise retries and dead-lettering.
    ///
    /// Permission: `terminal`.
    #[oai(
        path = "/sandbox/messages",
        method = "get",
        operation_id = "listSandboxMessages"
    )]
    async fn messages(
        &self,
        state: poem::web::Data<&AppState>,
        auth: ApiKeyAuth,
        /// E.164 phone number.
        phone: Query<crate::http::fields::Phone>,
        /// At most this many messages (1 to 200, default 50).
        limit: Query<Option<crate::http::fields::PageLimit>>,
        cursor: Query<Option<String>>,
    ) -> poem::Result<Reply<Vec<SandboxMessage>>> {
        auth.0.require(Permission::Terminal)?;
        let p = &auth.0;
        if !p.is_sandbox {
            return Err(ApiError::not_found("Resource").into());
        }
        let Some(phone) = validate::normalize_phone(&phone.0) else {
            return Err(ApiError::field(
                "query:phone",
                "invalid_phone",
                "must be an E.164 phone number",
            )
            .into());
        };
        let mut e = crate::domain::validate::Errors::default();
        let limit = crate::http::fields::PageLimit::resolve(limit.0, &mut e);
        e.finish()?;
        let before = super::cursor::after("sandbox_message", &cursor.0)?;
        let rows = store::sandbox_messages::list_for_phone(
            &state.0.db,
            p.integration_id,
            &phone,
            before,
            limit + 1,
        )
        .await
        .map_err(ApiError::from)?;
        let (rows, more) = crate::domain::page_of(rows, limit);
        let page = super::cursor::page("sandbox_message", &rows, more, |m| m.id);
        let merchants = crate::domain::platform::authorized_merchants(&state.0.db, p).await?;
        let out: Vec<SandboxMessage> = rows
            .into_iter()
            // A merchant-scoped key sees its own merchant's messages only.
            .filter(|m| m.merchant_id.is_none_or(|id| merchants.contains(&id)))
            .map(|m| SandboxMessage {
                message_id: m.id.to_string(),
                kind: m.kind,
                phone: m.phone,
                code: m.code,
                verification_token: m.verification_token,
                body: m.body,
                sent_at: m
                    .sent_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                merchant_id: m.merchant_id.map(|u| u.to_string()),
            })
            .collect();
        Ok(Reply::page(&out, &page))
    }
}
