//! The event feed (x-api-key, permission `webhooks`): the events the webhooks carry, pulled.
use crate::http::pipeline::fields::{
    Cursor, DateTimeText, EventTypes, Field, OneOf, PageLimit, Text, UuidText,
};
use crate::http::pipeline::query_group::{Grouped, query_group};
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::Serialize;

use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::common::{path_uuid, ts},
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::Permission,
        validate::{self, Errors},
        webhooks::event_feed::{self, Event},
    },
    state::AppState,
};

/// An event exactly as its webhook delivery carried it (the spec's event envelope).
#[derive(Object, Serialize)]
pub struct EventView {
    /// Globally unique; the receiver's deduplication key.
    pub event_id: String,
    /// One of the catalog's event types.
    pub event_type: String,
    /// When the change happened (RFC 3339, milliseconds, UTC).
    pub occurred_at: String,
    /// When the relay emitted it, after the change's transaction committed.
    pub emitted_at: String,
    pub merchant_id: String,
    /// The event's payload, as delivered.
    pub data: serde_json::Value,
    /// Monotonic per resource; orders events within one resource only.
    pub sequence_number: i64,
}

fn view(e: &Event) -> EventView {
    EventView {
        event_id: e.event_id.to_string(),
        event_type: e.event_type.clone(),
        occurred_at: ts(e.occurred_at),
        emitted_at: ts(e.emitted_at),
        merchant_id: e.merchant_id.to_string(),
        data: e.data.clone(),
        sequence_number: e.sequence_number,
    }
}

query_group! {
    /// Which events, and the page.
    pub struct EventQuery {
        /// Only this merchant's events (a platform key; a merchant's key sees its own).
        merchant_id: Option<UuidText> = "merchant_id",
        /// Only events of this type (the catalog's).
        event_type: Option<Field<OneOf<EventTypes>>> = "event_type",
        /// With `resource_id`: only the events of one resource (`payment`, `topup`,
        /// `wallet`, `wallet_user`, `promo_grant`, `offer`, `settlement`), in which
        /// `sequence_number` orders them.
        resource_type: Option<Text<1, 64>> = "resource_type",
        resource_id: Option<Text<1, 128>> = "resource_id",
        /// Only events that occurred at or after this time (RFC 3339).
        occurred_after: Option<DateTimeText> = "occurred_after",
        /// Only events that occurred before this time (RFC 3339).
        occurred_before: Option<DateTimeText> = "occurred_before",
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

pub struct EventsApi;

#[OpenApi(tag = "Tag::Webhooks")]
impl EventsApi {
    /// List events
    ///
    /// The catalog events of the caller's merchants, newest first, with the payloads the
    /// webhooks carry: an integration whose endpoint was down pulls what it missed. Kept
    /// for 30 days: `occurred_after` defaults to, and cannot reach before, 30 days ago.
    /// Scoped like the subscriptions: a platform key sees every merchant linked to its
    /// integration (narrow with `merchant_id`), a merchant's key its own. Only emitted
    /// events are listed (an event appears once the relay has sent it to the queues,
    /// within a second of its commit). Cursor-paginated (`limit` 1–200, default 50).
    ///
    /// Permission: `webhooks`.
    #[oai(path = "/events", method = "get", operation_id = "listEvents")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        query: Grouped<EventQuery>,
    ) -> poem::Result<Reply<Vec<EventView>>> {
        auth.0.require(Permission::Webhooks)?;
        let EventQuery {
            merchant_id,
            event_type,
            resource_type,
            resource_id,
            occurred_after,
            occurred_before,
            limit,
            cursor,
        } = query.0;
        let mut e = Errors::default();
        let merchant_id = merchant_id
            .as_deref()
            .and_then(|m| validate::uuid(&mut e, "query:merchant_id", m));
        if let Some(t) = &event_type {
            t.check(&mut e, "query:event_type");
        }
        let resource = match (resource_type, resource_id) {
            (Some(t), Some(i)) => {
                t.check(&mut e, "query:resource_type");
                i.check(&mut e, "query:resource_id");
                Some((t.into_string(), i.into_string()))
            }
            (None, None) => None,
            (Some(_), None) => {
                e.push(
                    "query:resource_id",
                    "required",
                    "name the resource with resource_type",
                );
                None
            }
            (None, Some(_)) => {
                e.push(
                    "query:resource_type",
                    "required",
                    "name the resource with resource_id",
                );
                None
            }
        };
        let after = occurred_after
            .as_deref()
            .and_then(|t| validate::rfc3339(&mut e, "query:occurred_after", t));
        let before = occurred_before
            .as_deref()
            .and_then(|t| validate::rfc3339(&mut e, "query:occurred_before", t));
        if let (Some(a), Some(b)) = (after, before)
            && a >= b
        {
            e.push(
                "query:occurred_before",
                "invalid_range",
                "must be later than occurred_after",
            );
        }
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let cursor_id = crate::http::pipeline::cursor::after("event", &cursor)?;
        let q = event_feed::Query {
            merchant_id,
            event_type: event_type.map(String::from),
            resource,
            occurred_after: after,
            occurred_before: before,
        };
        let read = state.0.lagging().await;
        let (rows, more) = event_feed::list(&read.db, &auth.0, &q, cursor_id, limit).await?;
        let page = crate::http::pipeline::cursor::page("event", &rows, more, |e| e.event_id);
        Ok(Reply::lagging_page(
            &rows.iter().map(view).collect::<Vec<_>>(),
            &page,
            read.served,
        ))
    }

    /// Get an event
    ///
    /// One event of the caller's merchants, as its webhook delivery carried it. Another
    /// integration's event, or one older than 30 days, is NOT_FOUND.
    ///
    /// Permission: `webhooks`.
    #[oai(path = "/events/:event_id", method = "get", operation_id = "getEvent")]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        event_id: Path<UuidText>,
    ) -> poem::Result<Reply<EventView>> {
        auth.0.require(Permission::Webhooks)?;
        let id = path_uuid("path:eventId", &event_id.0)?;
        let read = state.0.lagging().await;
        let (e, served) = match event_feed::get(&read.db, &auth.0, id).await {
            Err(e) if read.ask_primary_after(&e) => (
                event_feed::get(&state.0.db, &auth.0, id).await?,
                crate::store::db::replica::Served::Primary,
            ),
            found => (found?, read.served),
        };
        Ok(Reply::lagging(&view(&e), served))
    }
}
