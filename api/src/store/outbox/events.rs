//! The event history as `GET /events` reads it: catalog events of the outbox that the relay
//! has emitted (the outbox is also the history; relayed rows stay).
use chrono::{DateTime, Utc};
use entities::{integration_enterprise, outbox};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
    sea_query::{Expr, ExprTrait, Query},
};
use uuid::Uuid;

/// Whose events a caller sees.
#[derive(Clone, Copy, Debug)]
pub enum Merchants {
    One(Uuid),
    /// Every merchant linked to the integration.
    OfIntegration(Uuid),
    /// One merchant, if it is linked to the integration.
    OneOfIntegration {
        integration: Uuid,
        merchant: Uuid,
    },
    /// Nobody's: an empty feed.
    None,
}

#[derive(Clone, Debug)]
pub struct Filter {
    pub merchants: Merchants,
    pub event_type: Option<String>,
    pub resource: Option<(String, String)>,
    pub occurred_from: DateTime<Utc>,
    pub occurred_to: Option<DateTime<Utc>>,
}

fn scoped(f: &Filter) -> Condition {
    let mut c = Condition::all()
        .add(outbox::Column::Kind.eq("event"))
        .add(outbox::Column::RelayedAt.is_not_null())
        .add(outbox::Column::OccurredAt.gte(f.occurred_from));
    let linked = |i: Uuid| {
        outbox::Column::MerchantId.in_subquery(
            Query::select()
                .column(integration_enterprise::Column::EnterpriseId)
                .from(integration_enterprise::Entity)
                .and_where(integration_enterprise::Column::IntegrationId.eq(i))
                .to_owned(),
        )
    };
    c = match f.merchants {
        Merchants::One(m) => c.add(outbox::Column::MerchantId.eq(m)),
        Merchants::OfIntegration(i) => c.add(linked(i)),
        Merchants::OneOfIntegration {
            integration,
            merchant,
        } => c
            .add(outbox::Column::MerchantId.eq(merchant))
            .add(linked(integration)),
        Merchants::None => c.add(Expr::val(1).eq(0)),
    };
    if let Some(t) = &f.event_type {
        c = c.add(outbox::Column::Topic.eq(t.as_str()));
    }
    if let Some((ty, id)) = &f.resource {
        c = c
            .add(outbox::Column::ResourceType.eq(ty.as_str()))
            .add(outbox::Column::ResourceId.eq(id.as_str()));
    }
    if let Some(to) = f.occurred_to {
        c = c.add(outbox::Column::OccurredAt.lt(to));
    }
    c
}

/// Newest first (event ids are UUIDv7), after the cursor's event.
pub async fn page<C: ConnectionTrait>(
    c: &C,
    f: &Filter,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<outbox::Model>, DbErr> {
    let mut cond = scoped(f);
    if let Some(b) = before {
        cond = cond.add(outbox::Column::EventId.lt(b));
    }
    outbox::Entity::find()
        .filter(cond)
        .order_by_desc(outbox::Column::EventId)
        .limit(limit)
        .all(c)
        .await
}

/// One event in the caller's scope and window.
pub async fn find<C: ConnectionTrait>(
    c: &C,
    f: &Filter,
    event_id: Uuid,
) -> Result<Option<outbox::Model>, DbErr> {
    outbox::Entity::find()
        .filter(scoped(f).add(outbox::Column::EventId.eq(event_id)))
        .one(c)
        .await
}
