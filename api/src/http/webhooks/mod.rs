//! Webhook subscriptions and their delivery history (x-api-key).
pub mod events;
use crate::http::pipeline::fields::{
    EventTypes, Field, IntIn, List, MerchantScopes, OneOf, Text, WebhookUrl,
};
mod deliveries;

pub use deliveries::*;

use crate::http::pipeline::fields::UuidText;
use chrono::Utc;
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi,
    param::{Path, Query},
};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::Scope,
        validate::Errors,
        webhooks::{self, NewSubscription, Subscription, WithSecret},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

/// Register an endpoint.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct SubscriptionRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// HTTPS URL (plain HTTP only for sandbox integrations). Hosts that resolve to private,
    /// loopback, link-local or metadata addresses are refused.
    #[serde(default)]
    pub url: WebhookUrl,
    /// Up to 200 characters.
    #[oai(nullable)]
    pub description: Option<Text<1, 200>>,
    /// Event types to receive (from the catalog); null or absent: all of them.
    #[oai(nullable)]
    pub event_types: Option<List<Field<OneOf<EventTypes>>, 1, 64>>,
    /// `merchant` (default): events of `context.merchant_id` only. `integration` (platform
    /// key only): events of every merchant linked to the integration.
    #[oai(nullable)]
    pub merchant_scope: Option<Field<OneOf<MerchantScopes>>>,
}

impl Validate for SubscriptionRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.url.check(e, "/url");
        if let Some(d) = &self.description {
            d.check(e, "/description");
        }
        if let Some(types) = &self.event_types {
            types.check(e, "/event_types");
            for (i, t) in types.iter().enumerate() {
                t.check(e, &format!("/event_types/{i}"));
            }
        }
        if let Some(s) = &self.merchant_scope {
            s.check(e, "/merchant_scope");
        }
    }
}

/// A webhook endpoint.
#[derive(Object, Serialize)]
pub struct SubscriptionView {
    pub subscription_id: String,
    pub url: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Null: every event type.
    #[oai(nullable)]
    pub event_types: Option<Vec<String>>,
    /// The merchant whose events it gets; null: every merchant of the integration.
    #[oai(nullable)]
    pub merchant_id: Option<String>,
    /// ACTIVE or DISABLED.
    pub state: String,
    /// `manual`, or `failing` when sustained failure disabled it.
    #[oai(nullable)]
    pub disabled_reason: Option<String>,
    #[oai(nullable)]
    pub disabled_at: Option<String>,
    /// Failed attempts in a row (reset by a success).
    pub failure_streak: i32,
    /// While a rotated-out secret still signs beside the current one.
    #[oai(nullable)]
    pub previous_secret_expires_at: Option<String>,
    pub is_sandbox: bool,
    pub created_at: String,
    pub updated_at: String,
}

fn view(s: &Subscription) -> SubscriptionView {
    SubscriptionView {
        subscription_id: s.id.to_string(),
        url: s.url.clone(),
        description: s.description.clone(),
        event_types: s.event_types.clone(),
        merchant_id: s.merchant_id.map(|m| m.to_string()),
        state: s.state.as_str().to_string(),
        disabled_reason: s.disabled_reason.clone(),
        disabled_at: s.disabled_at.map(ts),
        failure_streak: s.failure_streak,
        previous_secret_expires_at: s.previous_secret_expires_at.map(ts),
        is_sandbox: s.is_sandbox,
        created_at: ts(s.created_at),
        updated_at: ts(s.updated_at),
    }
}

/// A subscription with its signing secret: shown here once (at creation and rotation).
#[derive(Object, Serialize)]
pub struct SubscriptionWithSecret {
    pub subscription: SubscriptionView,
    /// Verify `Service-Signature` with it; it is never shown again.
    pub secret: String,
}

fn with_secret(w: WithSecret) -> Outcome<SubscriptionWithSecret> {
    let secret = w.secret.clone();
    Outcome::new(SubscriptionWithSecret {
        subscription: view(&w.subscription),
        secret: w.secret,
    })
    .with_secret(secret)
}

/// A body with the envelope only.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct WebhookEnvelope {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
}

impl Validate for WebhookEnvelope {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
    }
}

/// Re-enable an endpoint.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct EnableRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Also send the events that arrived while it was disabled (default false).
    #[oai(nullable)]
    pub replay_missed: Option<bool>,
}

impl Validate for EnableRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
    }
}

#[derive(Object, Serialize)]
pub struct EnableResult {
    pub subscription: SubscriptionView,
    /// Events that arrived while it was disabled.
    pub missed_deliveries: u64,
    /// How many of them are being sent now.
    pub replayed_deliveries: u64,
}

/// Rotate the signing secret.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct RotateRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// How long the previous secret keeps signing beside the new one (0 to 604800 seconds;
    /// default 86400). Deliveries carry both signatures meanwhile.
    #[oai(nullable)]
    pub grace_period_secs: Option<IntIn<0, 604_800>>,
}

impl Validate for RotateRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if let Some(g) = &self.grace_period_secs {
            g.check(e, "/grace_period_secs");
        }
    }
}

pub struct WebhooksApi;

#[OpenApi(tag = "Tag::Webhooks")]
impl WebhooksApi {
    /// Register a webhook endpoint
    ///
    /// Events are POSTed as the event envelope with `Service-Signature:
    /// t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` keyed by the subscription's
    /// secret, shown once in this response. At least once: dedup on `event_id`. Ordered
    /// per resource. Retries: 14 attempts with exponential backoff and jitter (1 min,
    /// doubling to 6 h; about 16 to 33 hours in all), then the delivery is DEAD and
    /// dead-lettered. An endpoint whose attempts failed 200 times in a row over at least
    /// 24 hours is disabled (`disabled_reason: failing`) until re-enabled.
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions",
        method = "post",
        operation_id = "createWebhookSubscription"
    )]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<SubscriptionRequest>,
    ) -> poem::Result<Reply<SubscriptionWithSecret>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let st = state.0.clone();
        let p = &auth.0;
        let b = &body.value;
        let all = b.merchant_scope.as_deref() == Some("integration");
        if all && p.scope != Scope::Integration {
            return Err(ApiError::forbidden(
                "Only the platform key subscribes to every merchant of the integration.",
            )
            .into());
        }
        webhooks::check_url(
            &b.url,
            p.is_sandbox,
            st.config.webhook_allow_private_targets,
        )
        .await?;
        key.run(&auth.0, &body, async move |txn, acting| {
            let now = Utc::now();
            let w = webhooks::create(
                txn,
                &st.sealer,
                p,
                NewSubscription {
                    url: b.url.to_string(),
                    description: b.description.clone().map(String::from),
                    event_types: b
                        .event_types
                        .as_ref()
                        .map(|ts| ts.iter().map(|t| t.to_string()).collect()),
                    merchant_id: (!all).then_some(acting.merchant_id),
                },
                now,
            )
            .await?;
            Ok(with_secret(w))
        })
        .await
    }

    /// List webhook endpoints
    ///
    /// In the order they were registered; a merchant's key sees its merchant's only.
    /// Cursor-paginated (`limit` 1–200, default 50; pass `meta.next_cursor` as `cursor`).
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions",
        method = "get",
        operation_id = "listWebhookSubscriptions"
    )]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        limit: Query<Option<crate::http::pipeline::fields::PageLimit>>,
        cursor: Query<Option<crate::http::pipeline::fields::Cursor>>,
    ) -> poem::Result<Reply<Vec<SubscriptionView>>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let mut e = Errors::default();
        let limit = crate::http::pipeline::fields::PageLimit::resolve(limit.0, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("subscription", &cursor.0)?;
        let now = Utc::now();
        let (rows, more) = webhooks::list(&state.0.db, &auth.0, after, limit, now).await?;
        let page = crate::http::pipeline::cursor::page("subscription", &rows, more, |s| s.id);
        Ok(Reply::page(
            &rows.iter().map(view).collect::<Vec<_>>(),
            &page,
        ))
    }

    /// Disable a webhook endpoint
    ///
    /// Nothing is sent while it is disabled; events meanwhile are kept (SUSPENDED) for
    /// re-enabling to replay. Disabling a disabled endpoint changes nothing.
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions/:id/disable",
        method = "post",
        operation_id = "disableWebhookSubscription"
    )]
    async fn disable(
        &self,
        auth: ApiKeyAuth,
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<WebhookEnvelope>,
    ) -> poem::Result<Reply<SubscriptionView>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let sid = path_uuid("path:id", &id.0)?;
        let p = &auth.0;
        key.run(&auth.0, &body, async move |txn, _| {
            let now = Utc::now();
            let s = webhooks::disable(txn, p, sid, now).await?;
            Ok(Outcome::new(view(&s)))
        })
        .await
    }

    /// Enable a webhook endpoint
    ///
    /// Resumes deliveries (and clears the failure streak). With `replay_missed: true`, the
    /// events that arrived while it was disabled are sent too, in order per resource.
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions/:id/enable",
        method = "post",
        operation_id = "enableWebhookSubscription"
    )]
    async fn enable(
        &self,
        auth: ApiKeyAuth,
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<EnableRequest>,
    ) -> poem::Result<Reply<EnableResult>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let sid = path_uuid("path:id", &id.0)?;
        let p = &auth.0;
        let replay = body.value.replay_missed.unwrap_or(false);
        key.run(&auth.0, &body, async move |txn, _| {
            let now = Utc::now();
            let (s, missed, replayed) = webhooks::enable(txn, p, sid, replay, now).await?;
            Ok(Outcome::new(EnableResult {
                subscription: view(&s),
                missed_deliveries: missed,
                replayed_deliveries: replayed,
            }))
        })
        .await
    }

    /// Rotate a webhook signing secret
    ///
    /// Returns the new secret once. The previous one keeps signing beside it for the grace
    /// period: deliveries carry two `v1=` signatures meanwhile, so receivers can switch
    /// without losing events.
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions/:id/rotate-secret",
        method = "post",
        operation_id = "rotateWebhookSecret"
    )]
    async fn rotate(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<RotateRequest>,
    ) -> poem::Result<Reply<SubscriptionWithSecret>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let sid = path_uuid("path:id", &id.0)?;
        let st = state.0.clone();
        let p = &auth.0;
        let grace = chrono::Duration::seconds(
            body.value
                .grace_period_secs
                .map_or(st.config.webhook_secret_grace_secs as i64, |g| g.0),
        );
        key.run(&auth.0, &body, async move |txn, _| {
            let now = Utc::now();
            let w = webhooks::rotate(txn, &st.sealer, p, sid, grace, now).await?;
            Ok(with_secret(w))
        })
        .await
    }
}
