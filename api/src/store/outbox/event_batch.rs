//! A batch of outbox events as one write: the rows and the per-resource sequence counters
//! they advance. `outbox` builds batches; `writes` runs them with the other held writes.
use chrono::{DateTime, Utc};
use entities::{outbox, resource_sequence};
use sea_orm::{
    DbBackend, EntityName,
    sea_query::{Alias, Expr, ExprTrait, OnConflict, Query, Values},
};
use uuid::Uuid;

use crate::store::{
    db::template::{Args, Bound, NAME, Shape, Template, built},
    outbox::outbox_row::NewOutbox,
};

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

    pub(in crate::store) fn touches(&self) -> Vec<String> {
        self.resources
            .iter()
            .map(|((t, id), _)| format!("resource_sequences:{t}:{id}"))
            .collect()
    }

    /// Adds each resource's count to its counter. On PostgreSQL it returns the new last
    /// values, for `rows` to number themselves from in the same statement.
    pub(in crate::store) fn sequences(&self) -> Bound {
        let args = self
            .resources
            .iter()
            .flat_map(|((t, id), n)| [t.as_str().into(), id.as_str().into(), (*n).into()])
            .collect();
        let shape = Shape {
            index: self.resources.len().saturating_sub(1),
            key: 0,
        };
        SEQUENCES.bind(shape, args, build_sequences)
    }

    /// The event rows, each numbered down from its resource's new last value: in the
    /// counters' table on SQLite, which has run `sequences` before; on PostgreSQL in the
    /// rows `sequences` returns, a CTE the batch names (`template::NAME`).
    pub(in crate::store) fn rows(self) -> Bound {
        let request_id = self.origin.as_ref().map(|o| o.request_id.clone());
        let traceparent = self.origin.as_ref().and_then(|o| o.traceparent.clone());
        let mut args = Vec::with_capacity(self.rows.len() * ROW);
        for (item, event_id, at, offset) in self.rows {
            let (t, id) = &self.resources[at].0;
            args.extend([
                event_id.into(),
                item.kind.as_str().into(),
                item.topic.into(),
                item.merchant_id.into(),
                item.resource_type.into(),
                item.resource_id.into(),
                t.as_str().into(),
                id.as_str().into(),
                offset.into(),
                item.payload.into(),
                item.occurred_at.into(),
                self.now.into(),
                request_id.clone().into(),
                traceparent.clone().into(),
            ]);
        }
        let shape = Shape {
            index: args.len().div_ceil(ROW).saturating_sub(1),
            key: 0,
        };
        ROWS.bind(shape, args, build_rows)
    }
}

// A payment's events, rendered once per number of resources and of rows.
static SEQUENCES: Template = Template::new();
static ROWS: Template = Template::new();

/// Arguments per event row.
const ROW: usize = 14;

fn build_sequences(backend: DbBackend, _: Shape, a: &Args) -> (String, Values) {
    use resource_sequence::Column as Col;
    let mut q = Query::insert();
    q.into_table(resource_sequence::Entity).columns([
        Col::ResourceType,
        Col::ResourceId,
        Col::LastValue,
    ]);
    for r in 0..a.count() / 3 {
        q.values_panic([
            a.get(3 * r).into(),
            a.get(3 * r + 1).into(),
            a.get(3 * r + 2).into(),
        ]);
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
    if backend == DbBackend::Postgres {
        q.returning(Query::returning().columns([
            Col::ResourceType,
            Col::ResourceId,
            Col::LastValue,
        ]));
    }
    built(&q, backend)
}

fn build_rows(backend: DbBackend, _: Shape, a: &Args) -> (String, Values) {
    use outbox::Column as Col;
    let counters = match backend {
        DbBackend::Postgres => Alias::new(NAME),
        _ => Alias::new(resource_sequence::Entity.table_name()),
    };
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
    for r in 0..a.count() / ROW {
        let arg = |i: usize| a.get(r * ROW + i);
        let last = Query::select()
            .column(resource_sequence::Column::LastValue)
            .from(counters.clone())
            .and_where(Expr::col(resource_sequence::Column::ResourceType).eq(arg(6)))
            .and_where(Expr::col(resource_sequence::Column::ResourceId).eq(arg(7)))
            .to_owned();
        let number = Expr::SubQuery(None, Box::new(last.into())).sub(arg(8));
        q.values_panic([
            arg(0).into(),
            arg(1).into(),
            arg(2).into(),
            arg(3).into(),
            arg(4).into(),
            arg(5).into(),
            number,
            arg(9).into(),
            arg(10).into(),
            arg(11).into(),
            arg(12).into(),
            arg(13).into(),
        ]);
    }
    built(&q, backend)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::outbox::outbox_row::OutboxKind;

    fn event(resource: &str, n: usize) -> NewOutbox {
        NewOutbox {
            kind: OutboxKind::Event,
            topic: "payment.completed".into(),
            merchant_id: n.is_multiple_of(2).then(Uuid::now_v7),
            resource_type: "payment".into(),
            resource_id: resource.into(),
            payload: serde_json::json!({"n": n}),
            occurred_at: Utc::now(),
        }
    }

    fn events(resources: &[(&str, usize)]) -> Events {
        let items = resources
            .iter()
            .flat_map(|(r, n)| (0..*n).map(|i| event(r, i)))
            .collect();
        Events::new(items, Utc::now()).0
    }

    #[test]
    fn a_batch_of_events_binds_the_values_of_its_call_on_both_backends() {
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            // Twice each: the second finds the text the first rendered; 9 rows have no slot.
            for shape in [
                &[("a", 1)][..],
                &[("a", 1)],
                &[("a", 2), ("b", 1)],
                &[("c", 9)],
            ] {
                let [made, direct] = events(shape).sequences().both(backend);
                assert_eq!(made, direct, "sequences of {shape:?} on {backend:?}");
                let [made, direct] = events(shape).rows().both(backend);
                assert_eq!(made, direct, "rows of {shape:?} on {backend:?}");
            }
        }
    }

    #[test]
    fn the_rows_read_the_counters_the_batch_names_on_postgres_and_the_table_on_sqlite() {
        let e = || events(&[("a", 2), ("b", 1)]);
        let (mut sql, mut values) = (String::new(), Vec::new());
        e().rows()
            .fragment(DbBackend::Postgres)
            .unwrap()
            .append_named(&mut sql, &mut values, "s4");
        assert_eq!(sql.matches(r#"FROM "s4""#).count(), 3, "{sql}");
        assert!(!sql.contains(NAME));
        let (sqlite, _) = e().rows().fragment(DbBackend::Sqlite).unwrap().text();
        assert_eq!(sqlite.matches(r#"FROM "resource_sequences""#).count(), 3);
    }
}
