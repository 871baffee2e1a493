use chrono::{DateTime, Utc};
use entities::{operator, operator::OperatorStatus, operator_audit, operator_session};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, sea_query::Expr,
};
use uuid::Uuid;

use crate::store::uuid_v7_floor;

pub async fn active_by_prefix<C: ConnectionTrait>(
    c: &C,
    prefix: &str,
) -> Result<Vec<operator::Model>, DbErr> {
    operator::Entity::find()
        .filter(operator::Column::KeyPrefix.eq(prefix))
        .filter(operator::Column::Status.eq(OperatorStatus::Active.as_str()))
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
        .filter(operator::Column::Status.eq(OperatorStatus::Active.as_str()))
        .one(c)
        .await
}

/// Operators no longer active whose key has `prefix`: a refused key that matches one of
/// them is audited as a disabled operator's attempt.
pub async fn inactive_by_prefix<C: ConnectionTrait>(
    c: &C,
    prefix: &str,
) -> Result<Vec<operator::Model>, DbErr> {
    operator::Entity::find()
        .filter(operator::Column::KeyPrefix.eq(prefix))
        .filter(operator::Column::Status.ne(OperatorStatus::Active.as_str()))
        .limit(8)
        .all(c)
        .await
}

pub async fn find<C: ConnectionTrait>(c: &C, id: Uuid) -> Result<Option<operator::Model>, DbErr> {
    operator::Entity::find_by_id(id).one(c).await
}

/// Sets an operator's status; false when no operator has that id.
pub async fn set_status<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    status: OperatorStatus,
) -> Result<bool, DbErr> {
    let r = operator::Entity::update_many()
        .col_expr(operator::Column::Status, Expr::value(status.as_str()))
        .filter(operator::Column::Id.eq(id))
        .exec(c)
        .await?;
    Ok(r.rows_affected == 1)
}

pub async fn insert_session<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    operator_id: Uuid,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<(), DbErr> {
    operator_session::Entity::insert(operator_session::ActiveModel {
        id: Set(id),
        operator_id: Set(operator_id),
        created_at: Set(now),
        expires_at: Set(expires_at),
        revoked_at: Set(None),
    })
    .exec_without_returning(c)
    .await?;
    Ok(())
}

/// The operator of session `id`, while the session is neither revoked nor expired and the
/// operator active.
pub async fn live_session<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    operator_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Option<operator::Model>, DbErr> {
    let live = operator_session::Entity::find_by_id(id)
        .filter(operator_session::Column::OperatorId.eq(operator_id))
        .filter(operator_session::Column::RevokedAt.is_null())
        .filter(operator_session::Column::ExpiresAt.gt(now))
        .one(c)
        .await?;
    match live {
        Some(_) => find_active(c, operator_id).await,
        None => Ok(None),
    }
}

/// Ends session `id` (sign-out). Ending an ended one is a no-op.
pub async fn revoke_session<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    operator_session::Entity::update_many()
        .col_expr(operator_session::Column::RevokedAt, Expr::value(now))
        .filter(operator_session::Column::Id.eq(id))
        .filter(operator_session::Column::RevokedAt.is_null())
        .exec(c)
        .await?;
    Ok(())
}

/// Ends every session of `operator_id`; how many were still open.
pub async fn revoke_sessions_of<C: ConnectionTrait>(
    c: &C,
    operator_id: Uuid,
    now: DateTime<Utc>,
) -> Result<u64, DbErr> {
    let r = operator_session::Entity::update_many()
        .col_expr(operator_session::Column::RevokedAt, Expr::value(now))
        .filter(operator_session::Column::OperatorId.eq(operator_id))
        .filter(operator_session::Column::RevokedAt.is_null())
        .exec(c)
        .await?;
    Ok(r.rows_affected)
}

/// A new operator's stored credential (the key only as its bcrypt hash).
pub struct NewOperator<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub key_prefix: &'a str,
    pub key_hash: String,
    pub key_last_four: &'a str,
}

pub async fn insert<C: ConnectionTrait>(c: &C, o: NewOperator<'_>) -> Result<(), DbErr> {
    operator::ActiveModel {
        id: Set(o.id),
        name: Set(o.name.to_string()),
        key_prefix: Set(o.key_prefix.to_string()),
        key_hash: Set(o.key_hash),
        key_last_four: Set(o.key_last_four.to_string()),
        status: Set(OperatorStatus::Active),
        created_at: Set(Utc::now()),
    }
    .insert(c)
    .await?;
    Ok(())
}

/// One line of the audit log: who did what to which object, why, with what.
pub struct AuditEntry<'a> {
    pub actor: &'a str,
    pub action: &'a str,
    pub target_type: &'a str,
    pub target_id: Option<String>,
    pub reason: Option<String>,
    pub details: serde_json::Value,
}

pub async fn insert_audit<C: ConnectionTrait>(c: &C, e: AuditEntry<'_>) -> Result<(), DbErr> {
    operator_audit::ActiveModel {
        id: Set(Uuid::now_v7()),
        actor: Set(e.actor.to_string()),
        action: Set(e.action.to_string()),
        target_type: Set(e.target_type.to_string()),
        target_id: Set(e.target_id),
        reason: Set(e.reason),
        details: Set(e.details),
        created_at: Set(Utc::now()),
    }
    .insert(c)
    .await?;
    Ok(())
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
