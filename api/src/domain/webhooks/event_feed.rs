//! `GET /events`: the catalog events a partner's webhooks carry, to pull instead of (or
//! after) receiving them, so an integration whose endpoint was down can reconcile. Scoped
//! like the subscriptions (a platform key sees every merchant linked to its integration, a
//! merchant's key its merchant's), kept for `KEPT_DAYS`, newest first.
use chrono::{DateTime, Duration, Utc};
use entities::outbox;
use sea_orm::ConnectionTrait;
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{credentials::Principal, webhooks};
use crate::{
    error::ApiError,
    store::outbox::events::{self as store, Filter, Merchants},
};

/// How far back the feed reaches.
pub const KEPT_DAYS: i64 = 30;

/// The caller's filters, already validated.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub merchant_id: Option<Uuid>,
    pub event_type: Option<String>,
    pub resource: Option<(String, String)>,
    pub occurred_after: Option<DateTime<Utc>>,
    pub occurred_before: Option<DateTime<Utc>>,
}

/// One event as its webhook delivery carried it (`emitted_at` is when the relay emitted it).
#[derive(Clone, Debug)]
pub struct Event {
    pub event_id: Uuid,
    pub event_type: String,
    pub occurred_at: DateTime<Utc>,
    pub emitted_at: DateTime<Utc>,
    pub merchant_id: Uuid,
    pub data: Value,
    pub sequence_number: i64,
}

impl Event {
    fn of(row: outbox::Model) -> Option<Event> {
        Some(Event {
            event_id: row.event_id,
            event_type: row.topic,
            occurred_at: row.occurred_at,
            emitted_at: row.relayed_at?,
            merchant_id: row.merchant_id?,
            data: row.payload,
            sequence_number: row.sequence_number,
        })
    }
}

/// The oldest `occurred_at` the feed serves at `now`.
pub fn horizon(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::days(KEPT_DAYS)
}

fn filter(p: &Principal, q: &Query, now: DateTime<Utc>) -> Result<Filter, ApiError> {
    let merchants = match (webhooks::control_plane(p)?, q.merchant_id) {
        (None, None) => Merchants::OfIntegration(p.integration_id),
        (None, Some(m)) => Merchants::OneOfIntegration {
            integration: p.integration_id,
            merchant: m,
        },
        (Some(own), None) => Merchants::One(own),
        // Another merchant's events are simply not in a merchant key's feed.
        (Some(own), Some(m)) if m == own => Merchants::One(own),
        (Some(_), Some(_)) => Merchants::None,
    };
    Ok(Filter {
        merchants,
        event_type: q.event_type.clone(),
        resource: q.resource.clone(),
        occurred_from: q
            .occurred_after
            .map_or(horizon(now), |a| a.max(horizon(now))),
        occurred_to: q.occurred_before,
    })
}

/// A page of the caller's events, newest first, after the cursor's event.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    q: &Query,
    before: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<Event>, bool), ApiError> {
    let f = filter(p, q, Utc::now())?;
    let rows = store::page(c, &f, before, limit + 1).await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    Ok((rows.into_iter().filter_map(Event::of).collect(), more))
}

/// One of the caller's events; another tenant's, one not yet emitted or one past the
/// horizon is NOT_FOUND.
pub async fn get<C: ConnectionTrait>(c: &C, p: &Principal, id: Uuid) -> Result<Event, ApiError> {
    let f = filter(p, &Query::default(), Utc::now())?;
    store::find(c, &f, id)
        .await?
        .and_then(Event::of)
        .ok_or_else(|| ApiError::not_found("Event"))
}
