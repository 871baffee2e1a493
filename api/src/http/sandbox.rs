//! The sandbox's own tools: the SMS inbox (what the mock provider "sent" to a phone) and
//! the test clock (`domain::sandbox::test_clock`).
use chrono::{DateTime, Utc};
use poem_openapi::{Object, OpenApi, param::Query};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, ts},
    pipeline::fields::IntIn,
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        incentives::expiry,
        sandbox::clock::{Clock, MAX_STEP_SECS},
        sandbox::test_clock,
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
    store,
};

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

/// A sandbox integration's test clock.
#[derive(Object, Serialize)]
pub struct SandboxClock {
    /// The integration's time: real time plus `offset_seconds`. Expiries, windows and the
    /// jobs that act on time use it.
    pub now: String,
    /// How far the clock runs ahead of real time, in seconds (0: never advanced).
    pub offset_seconds: i64,
    /// Real time when the clock was read.
    pub real_now: String,
}

impl SandboxClock {
    fn of(clock: Clock, real: DateTime<Utc>) -> Self {
        SandboxClock {
            now: ts(clock.at(real)),
            offset_seconds: clock.offset_secs(),
            real_now: ts(real),
        }
    }
}

/// How far to move a sandbox integration's test clock forward.
#[derive(Object, Deserialize)]
pub struct ClockAdvanceRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// How far to move the clock forward, in seconds: 1 to 31,622,400 (366 days). The
    /// clock never runs more than 3,660 days ahead of real time.
    pub seconds: IntIn<1, MAX_STEP_SECS>,
}

impl Validate for ClockAdvanceRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.seconds.check(e, "/seconds");
    }
}

#[OpenApi(tag = "Tag::Platform")]
impl SandboxApi {
    /// Read the sandbox test clock
    ///
    /// The time the integration's rules run at. Sandbox keys only: a production key gets
    /// NOT_FOUND.
    ///
    /// Permission: `terminal`.
    #[oai(
        path = "/sandbox/clock",
        method = "get",
        operation_id = "getSandboxClock"
    )]
    async fn clock(&self, auth: ApiKeyAuth) -> poem::Result<Reply<SandboxClock>> {
        auth.0.require(Permission::Terminal)?;
        test_clock::sandbox_only(&auth.0)?;
        Ok(Reply::ok(&SandboxClock::of(auth.0.clock(), Utc::now())))
    }

    /// Advance the sandbox test clock
    ///
    /// Moves the integration's time forward (never back), so expiry flows can be watched
    /// without waiting: promotional grants (cashback, reload and SKU bonuses, offer
    /// rewards), pending enrollments and their codes, OTPs, QR nonces and short codes,
    /// offers and checkout sessions expire by the integration's time, and the jobs that
    /// act on time run against it. When this returns, everything due at the new time has
    /// been ended, with its events. What protects the service keeps real time: key and
    /// terminal-token lifetimes, Idempotency-Key windows, rate limits, webhook signatures
    /// and delivery. Records and events written by the integration's rules carry its time.
    ///
    /// Sandbox platform (integration-wide) keys only: a production key gets NOT_FOUND, a
    /// merchant, brand or branch key FORBIDDEN.
    ///
    /// Permission: `integrations:update`.
    #[oai(
        path = "/sandbox/clock/advance",
        method = "post",
        operation_id = "advanceSandboxClock"
    )]
    async fn advance(
        &self,
        state: poem::web::Data<&AppState>,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<ClockAdvanceRequest>,
    ) -> poem::Result<Reply<SandboxClock>> {
        auth.0.require(Permission::IntegrationsUpdate)?;
        test_clock::sandbox_only(&auth.0)?;
        let st = state.0;
        let p = &auth.0;
        let current = p.clock();
        let step = body.value.seconds.0;
        let reply = key
            .run(p, &body, async move |txn, _| {
                let (_, clock) = test_clock::advance(txn, p, current, step).await?;
                Ok(Outcome::new(SandboxClock::of(clock, Utc::now())))
            })
            .await?;
        // Committed (or replayed): every replica's next request reads the new clock from the
        // database, and what is due by it ends now rather than at the next sweep. The shared
        // entry is dropped rather than overwritten: two advances at once could publish their
        // clocks in either order and leave the earlier one standing.
        st.standing().forget(p.integration_id).await?;
        if let Some(i) = store::tenancy::find_integration(&st.db, p.integration_id)
            .await
            .map_err(ApiError::from)?
        {
            let clock = Clock::from_column(i.clock_offset_secs);
            expiry::run_for(&st.db, i.id, clock).await?;
        }
        Ok(reply)
    }

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
        phone: Query<crate::http::pipeline::fields::Phone>,
        /// At most this many messages (1 to 200, default 50).
        limit: Query<Option<crate::http::pipeline::fields::PageLimit>>,
        cursor: Query<Option<crate::http::pipeline::fields::Cursor>>,
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
        let limit = crate::http::pipeline::fields::PageLimit::resolve(limit.0, &mut e);
        e.finish()?;
        let before = crate::http::pipeline::cursor::after("sandbox_message", &cursor.0)?;
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
        let page = crate::http::pipeline::cursor::page("sandbox_message", &rows, more, |m| m.id);
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
