use chrono::{DateTime, Utc};
use entities::{operator, operator_audit};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::uuid_v7_floor;

pub async fn active_by_prefix<C: ConnectionTrait>(
    c: &C,
    prefix: &str,
) -> Result<Vec<operator::Model>, DbErr> {
    operator::Entity::find()
        .filter(operator::Column::KeyPrefix.eq(prefix))
        .filter(operator::Column::Status.eq("active"))
        .limit(8)
        .all(c)
        .await
}

/// An operator still active (a console session is only as good as its operator).
pub async fn find_active<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<operator::Model>, DbErr> {
    operator::Entity::find_by_id(id)
        .filter(operator::Column::Status.eq("active"))
        .one(c)
        .await
}

/// Every operator, by name (a short list: the service's own staff).
pub async fn all<C: ConnectionTrait>(c: &C) -> Result<Vec<operator::Model>, DbErr> {
    operator::Entity::find()
        .order_by_asc(operator::Column::Name)
        .limit(1000)
        .all(c)
        .await
}

/// Which audit entries an operator looks for. Each narrows; the indexes `(actor, id)`,
/// `(action, id)` and `(target_id, id)` serve the equalities, and the time bounds are
/// ranges of the UUIDv7 `id`.
#[derive(Default, Clone, Debug)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    pub target_id: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

/// The audit log, newest first, after an optional cursor id.
pub async fn audit_page<C: ConnectionTrait>(
    c: &C,
    f: &AuditFilter,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<operator_audit::Model>, DbErr> {
    use operator_audit as a;
    let mut q = a::Entity::find();
    if let Some(b) = before {
        q = q.filter(a::Column::Id.lt(b));
    }
    if let Some(v) = &f.actor {
        q = q.filter(a::Column::Actor.eq(v.clone()));
    }
    if let Some(v) = &f.action {
        q = q.filter(a::Column::Action.eq(v.clone()));
    }
    if let Some(v) = &f.target_id {
        q = q.filter(a::Column::TargetId.eq(v.clone()));
    }
    if let Some(t) = f.since {
        q = q.filter(a::Column::Id.gte(uuid_v7_floor(t)));
    }
    if let Some(t) = f.until {
        q = q.filter(a::Column::Id.lt(uuid_v7_floor(t)));
    }
    q.order_by_desc(a::Column::Id).limit(limit).all(c).await
}
