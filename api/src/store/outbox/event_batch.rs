//! A batch of outbox events as one write: the rows and the per-resource sequence counters
//! they advance. `outbox` builds batches; `writes` runs them with the other held writes.
use chrono::{DateTime, Utc};
use entities::{outbox, resource_sequence};
use sea_orm::{
    DbErr,
    sea_query::{Alias, Expr, ExprTrait, InsertStatement, OnConflict, Query},
};
use uuid::Uuid;

use crate::store::outbox::outbox_row::NewOutbox;

/// A batch of events, numbered per resource: `sequence_number` counts a resource's events
/// in commit order. The upsert adding to the resource's counter holds its row until the
/// transaction ends, so two writers to one resource get consecutive numbers.
pub(in crate::store) struct Events {
    /// Each resource once, with how many of the events are its.
    resources: Vec<((String, String), i64)>,
    /// The rows, each with its resource and how far below that resource's new last value
    /// its number is.
    rows: Vec<(NewOutbox, Uuid, usize, i64)>,
    now: DateTime<Utc>,
    /// The request (and trace) the rows descend from, for the jobs and deliveries they
    /// become.
    origin: Option<crate::infra::current_request::Origin>,
}

impl Events {
    pub(in crate::store) fn new(items: Vec<NewOutbox>, now: DateTime<Utc>) -> (Self, Vec<Uuid>) {
        let mut resources: Vec<((String, String), i64)> = Vec::new();
        let mut placed = Vec::with_capacity(items.len());
        for item in &items {
            let key = (item.resource_type.clone(), item.resource_id.clone());
            let at = match resources.iter().position(|(r, _)| *r == key) {
                Some(at) => at,
                None => {
                    resources.push((key, 0));
                    resources.len() - 1
                }
            };
            resources[at].1 += 1;
            placed.push((at, resources[at].1));
        }
        let mut ids = Vec::with_capacity(items.len());
        let rows = items
            .into_iter()
            .zip(placed)
            .map(|(item, (at, nth))| {
                let event_id = Uuid::now_v7();
                ids.push(event_id);
                (item, event_id, at, resources[at].1 - nth)
            })
            .collect();
        (
            Events {
                resources,
                rows,
                now,
                // The rows hang off the span they are written in (the request's
                // transaction), so the relay continues the trace from there.
                origin: crate::infra::current_request::origin().map(|o| {
                    crate::infra::current_request::Origin {
                        traceparent: crate::infra::telemetry::trace::current_traceparent(
                            o.traceparent.as_deref(),
                        ),
                        ..o
                    }
                }),
            },
            ids,
        )
    }

    pub(in crate::store) fn resource(&self, at: usize) -> (&str, &str) {
        let (t, id) = &self.resources[at].0;
        (t, id)
    }

    pub(in crate::store) fn touches(&self) -> Vec<String> {
        self.resources
            .iter()
            .map(|((t, id), _)| format!("resource_sequences:{t}:{id}"))
            .collect()
    }

    /// Adds each resource's count to its counter.
    pub(in crate::store) fn sequences(&self) -> InsertStatement {
        use resource_sequence::Column as Col;
        let mut q = Query::insert();
        q.into_table(resource_sequence::Entity).columns([
            Col::ResourceType,
            Col::ResourceId,
            Col::LastValue,
        ]);
        for ((t, id), n) in &self.resources {
            q.values_panic([t.as_str().into(), id.as_str().into(), (*n).into()]);
        }
        q.on_conflict(
            OnConflict::columns([Col::ResourceType, Col::ResourceId])
                .value(
                    Col::LastValue,
                    Expr::col((resource_sequence::Entity, Col::LastValue))
                        .add(Expr::col((Alias::new("excluded"), Col::LastValue))),
                )
                .to_owned(),
        );
        q
    }

    /// `sequences`, returning the new last values.
    pub(in crate::store) fn sequences_returning(&self) -> InsertStatement {
        use resource_sequence::Column as Col;
        let mut q = self.sequences();
        q.returning(Query::returning().columns([
            Col::ResourceType,
            Col::ResourceId,
            Col::LastValue,
        ]));
        q
    }

    /// The event rows, numbered from the last values `sequences` left in `table` (the
    /// counters' table, or a CTE returning its rows).
    pub(in crate::store) fn insert_numbered_from(
        &self,
        table: impl sea_orm::sea_query::IntoIden + Clone,
    ) -> Result<InsertStatement, DbErr> {
        use resource_sequence::Column as Col;
        self.insert(|resource, offset| {
            let (t, id) = self.resource(resource);
            let last = Query::select()
                .column(Col::LastValue)
                .from(table.clone())
                .and_where(Expr::col(Col::ResourceType).eq(Expr::val(t)))
                .and_where(Expr::col(Col::ResourceId).eq(Expr::val(id)))
                .to_owned();
            Ok(Expr::SubQuery(None, Box::new(last.into())).sub(offset))
        })
    }

    /// The event rows; `last(resource, offset)` is the expression of the resource's new last
    /// value minus `offset`.
    pub(in crate::store) fn insert(
        &self,
        last: impl Fn(usize, i64) -> Result<Expr, DbErr>,
    ) -> Result<InsertStatement, DbErr> {
        use outbox::Column as Col;
        let mut q = Query::insert();
        q.into_table(outbox::Entity).columns([
            Col::EventId,
            Col::Kind,
            Col::Topic,
            Col::MerchantId,
            Col::ResourceType,
            Col::ResourceId,
            Col::SequenceNumber,
            Col::Payload,
            Col::OccurredAt,
            Col::CreatedAt,
            Col::RequestId,
            Col::Traceparent,
        ]);
        let request_id = self.origin.as_ref().map(|o| o.request_id.clone());
        let traceparent = self.origin.as_ref().and_then(|o| o.traceparent.clone());
        for (item, event_id, at, offset) in &self.rows {
            q.values_panic([
                (*event_id).into(),
                item.kind.as_str().into(),
                item.topic.as_str().into(),
                item.merchant_id.into(),
                item.resource_type.as_str().into(),
                item.resource_id.as_str().into(),
                last(*at, *offset)?,
                item.payload.clone().into(),
                item.occurred_at.into(),
                self.now.into(),
                request_id.clone().into(),
                traceparent.clone().into(),
            ]);
        }
        Ok(q)
    }
}
