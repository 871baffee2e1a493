//! A subscription's deliveries (`/webhooks/subscriptions/{id}/deliveries`): their history
//! with every attempt, and redelivery of one event or of every failed one since a time.
use crate::http::pipeline::fields::{
    Cursor, DeliveryStates, EventTypes, Field, OneOf, PageLimit, UuidText,
};
use crate::http::pipeline::query_group::{Grouped, query_group};
use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::http::webhooks::WebhookEnvelope;

use crate::{
    domain::{
        credentials::Permission,
        validate::{self, Errors},
        webhooks,
    },
    error::ApiError,
    http::{
        openapi::tags::Tag,
        pipeline::auth::ApiKeyAuth,
        pipeline::body::{JsonBody, Validate},
        pipeline::common::{RequestContext, RequestMeta, path_uuid, ts},
        pipeline::mutation::Idempotent,
        pipeline::reply::Reply,
    },
    idempotency::Outcome,
    state::AppState,
};

/// Redeliver every failed delivery since a time.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct RedeliverRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// RFC 3339: deliveries created at or after it that are DEAD (retries ran out) or
    /// SUSPENDED (the endpoint was disabled) are sent again.
    #[serde(default)]
    pub since: crate::http::pipeline::fields::DateTimeText,
}

impl Validate for RedeliverRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        validate::rfc3339(e, "/since", &self.since);
    }
}

#[derive(Object, Serialize)]
pub struct RedeliverResult {
    /// Deliveries sent again (each as a new series of attempts).
    pub redelivered: u64,
}

/// One HTTP attempt.
#[derive(Object, Serialize)]
pub struct AttemptView {
    pub attempt: i32,
    pub at: String,
    /// The endpoint's HTTP status; null when it never answered (timeout, refused).
    #[oai(nullable)]
    pub status_code: Option<i32>,
    pub latency_ms: i64,
    #[oai(nullable)]
    pub error: Option<String>,
    pub succeeded: bool,
    /// When the next attempt is due, if one is scheduled.
    #[oai(nullable)]
    pub next_retry_at: Option<String>,
}

pub(super) fn attempt_view(a: &webhooks::Attempt) -> AttemptView {
    AttemptView {
        attempt: a.attempt,
        at: ts(a.started_at),
        status_code: a.status_code,
        latency_ms: a.latency_ms,
        error: a.error.clone(),
        succeeded: a.succeeded,
        next_retry_at: a.next_retry_at.map(ts),
    }
}

/// One event for the endpoint, with every attempt.
#[derive(Object, Serialize)]
pub struct DeliveryView {
    pub delivery_id: String,
    pub event_id: String,
    pub event_type: String,
    pub sequence_number: i64,
    /// PENDING (being sent or retried), DELIVERED, DEAD (retries ran out; dead-lettered)
    /// or SUSPENDED (the endpoint was disabled).
    pub state: String,
    pub attempts_made: i32,
    #[oai(nullable)]
    pub last_status_code: Option<i32>,
    #[oai(nullable)]
    pub last_error: Option<String>,
    #[oai(nullable)]
    pub next_attempt_at: Option<String>,
    #[oai(nullable)]
    pub delivered_at: Option<String>,
    pub created_at: String,
    pub attempts: Vec<AttemptView>,
}

pub(super) fn delivery_view(d: &webhooks::Delivery) -> DeliveryView {
    DeliveryView {
        delivery_id: d.id.to_string(),
        event_id: d.event_id.to_string(),
        event_type: d.event_type.clone(),
        sequence_number: d.sequence_number,
        state: d.state.as_str().to_string(),
        attempts_made: d.attempts_made,
        last_status_code: d.last_status_code,
        last_error: d.last_error.clone(),
        next_attempt_at: d.next_attempt_at.map(ts),
        delivered_at: d.delivered_at.map(ts),
        created_at: ts(d.created_at),
        attempts: d.attempts.iter().map(attempt_view).collect(),
    }
}

pub struct DeliveriesApi;

query_group! {
    /// Which deliveries of a subscription, and the page.
    pub struct DeliveryQuery {
        event_type: Option<Field<OneOf<EventTypes>>> = "event_type",
        outcome: Option<Field<OneOf<DeliveryStates>>> = "outcome",
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

#[OpenApi(tag = "Tag::Webhooks")]
impl DeliveriesApi {
    /// Delivery history
    ///
    /// Every delivery to the endpoint, newest first, each with all its attempts (time,
    /// status code, latency, error, next retry). Filters: `event_type`, `outcome`
    /// (PENDING, DELIVERED, DEAD, SUSPENDED). Cursor-paginated (`limit` 1–200, default 50).
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions/:id/deliveries",
        method = "get",
        operation_id = "listWebhookDeliveries"
    )]
    async fn deliveries(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        id: Path<UuidText>,
        query: Grouped<DeliveryQuery>,
    ) -> poem::Result<Reply<Vec<DeliveryView>>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let sid = path_uuid("path:id", &id.0)?;
        let DeliveryQuery {
            event_type,
            outcome,
            limit,
            cursor,
        } = query.0;
        let mut e = Errors::default();
        if let Some(o) = &outcome {
            o.check(&mut e, "query:outcome");
        }
        if let Some(t) = &event_type {
            t.check(&mut e, "query:event_type");
        }
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("delivery", &cursor)?;
        let page = webhooks::deliveries(
            &state.0.db,
            &auth.0,
            sid,
            event_type.as_deref(),
            outcome.as_deref(),
            after,
            limit,
        )
        .await?;
        let meta =
            crate::http::pipeline::cursor::page("delivery", &page.deliveries, page.more, |d| d.id);
        Ok(Reply::page(
            &page
                .deliveries
                .iter()
                .map(delivery_view)
                .collect::<Vec<_>>(),
            &meta,
        ))
    }

    /// Redeliver one event
    ///
    /// Sends the delivery again as a new series of attempts, whatever its state.
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions/:id/deliveries/:delivery_id/redeliver",
        method = "post",
        operation_id = "redeliverWebhook"
    )]
    async fn redeliver(
        &self,
        auth: ApiKeyAuth,
        id: Path<UuidText>,
        delivery_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<WebhookEnvelope>,
    ) -> poem::Result<Reply<RedeliverResult>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let sid = path_uuid("path:id", &id.0)?;
        let did = path_uuid("path:deliveryId", &delivery_id.0)?;
        let p = &auth.0;
        key.run(&auth.0, &body, async move |txn, _| {
            webhooks::redeliver(txn, p, sid, did, Utc::now()).await?;
            Ok(Outcome::new(RedeliverResult { redelivered: 1 }))
        })
        .await
    }

    /// Redeliver failed events
    ///
    /// Sends again every delivery created since `since` that is DEAD (its retries ran out)
    /// or SUSPENDED (the endpoint was disabled).
    ///
    /// Permission: `webhooks`.
    #[oai(
        path = "/webhooks/subscriptions/:id/redeliver",
        method = "post",
        operation_id = "redeliverFailedWebhooks"
    )]
    async fn redeliver_failed(
        &self,
        auth: ApiKeyAuth,
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<RedeliverRequest>,
    ) -> poem::Result<Reply<RedeliverResult>> {
        auth.0.require(Permission::Webhooks)?;
        webhooks::control_plane(&auth.0)?;
        let sid = path_uuid("path:id", &id.0)?;
        // The body's validation already checked it.
        let since = DateTime::parse_from_rfc3339(&body.value.since)
            .map_err(ApiError::internal)?
            .with_timezone(&Utc);
        let p = &auth.0;
        key.run(&auth.0, &body, async move |txn, _| {
            let n = webhooks::redeliver_failed(txn, p, sid, since, Utc::now()).await?;
            Ok(Outcome::new(RedeliverResult { redelivered: n }))
        })
        .await
    }
}
