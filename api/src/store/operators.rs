use entities::operator;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};

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

/// The audit log, newest first, after an optional cursor id.
pub async fn audit_page<C: ConnectionTrait>(
    c: &C,
    before: Option<uuid::Uuid>,
    limit: u64,
) -> Result<Vec<entities::operator_audit::Model>, DbErr> {
    use entities::operator_audit as a;
    use sea_orm::QueryOrder;
    let mut q = a::Entity::find();
    if let Some(b) = before {
        q = q.filter(a::Column::Id.lt(b));
    }
    q.order_by_desc(a::Column::Id).limit(limit).all(c).await
}
