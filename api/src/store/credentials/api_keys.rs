use chrono::{DateTime, Utc};
use entities::{api_key, api_key::ApiKeyStatus, integration};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect,
    Set,
};
use uuid::Uuid;

/// A key's scope as its columns (`domain::credentials::Scope` converts into it).
#[derive(Clone, Debug)]
pub struct ScopeColumns {
    pub name: &'static str,
    pub enterprise_id: Option<Uuid>,
    pub brand_id: Option<Uuid>,
    pub branch_id: Option<Uuid>,
}

pub struct NewKey<'a> {
    pub id: Uuid,
    pub integration_id: Uuid,
    pub scope: ScopeColumns,
    pub key_prefix: &'a str,
    pub key_hash: &'a str,
    pub key_last_four: &'a str,
    pub label: &'a str,
    pub is_sandbox: bool,
    pub expires_at: Option<DateTime<Utc>>,
    pub previous_key_id: Option<Uuid>,
    /// The permissions column (`Permissions::to_column`).
    pub permissions: String,
    pub created_by_key_id: Option<Uuid>,
}

pub async fn insert<C: ConnectionTrait>(c: &C, k: NewKey<'_>) -> Result<api_key::Model, DbErr> {
    api_key::ActiveModel {
        id: Set(k.id),
        integration_id: Set(k.integration_id),
        scope: Set(k.scope.name.to_string()),
        enterprise_id: Set(k.scope.enterprise_id),
        brand_id: Set(k.scope.brand_id),
        branch_id: Set(k.scope.branch_id),
        key_prefix: Set(k.key_prefix.to_string()),
        key_hash: Set(k.key_hash.to_string()),
        key_last_four: Set(k.key_last_four.to_string()),
        label: Set(k.label.to_string()),
        is_sandbox: Set(k.is_sandbox),
        status: Set(ApiKeyStatus::Active),
        expires_at: Set(k.expires_at),
        previous_key_id: Set(k.previous_key_id),
        permissions: Set(k.permissions),
        created_by_key_id: Set(k.created_by_key_id),
        status_reason: Set(None),
        created_at: Set(Utc::now()),
        revoked_at: Set(None),
        deleted_at: Set(None),
    }
    .insert(c)
    .await
}

/// Active keys whose `key_prefix` matches, with their integration. The prefix carries 24
/// random bits, so more than one row is rare; the caller verifies each candidate.
pub async fn active_by_prefix<C: ConnectionTrait>(
    c: &C,
    key_prefix: &str,
) -> Result<Vec<(api_key::Model, integration::Model)>, DbErr> {
    let keys = api_key::Entity::find()
        .filter(api_key::Column::KeyPrefix.eq(key_prefix))
        .filter(api_key::Column::Status.eq(ApiKeyStatus::Active.as_str()))
        .limit(8)
        .all(c)
        .await?;
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        if let Some(i) = integration::Entity::find_by_id(k.integration_id)
            .one(c)
            .await?
        {
            out.push((k, i));
        }
    }
    Ok(out)
}

/// An active key by id, with its integration (a cached principal's re-check).
pub async fn active_by_id<C: ConnectionTrait>(
    c: &C,
    key_id: Uuid,
) -> Result<Option<(api_key::Model, integration::Model)>, DbErr> {
    let Some(key) = api_key::Entity::find_by_id(key_id)
        .filter(api_key::Column::Status.eq(ApiKeyStatus::Active.as_str()))
        .one(c)
        .await?
    else {
        return Ok(None);
    };
    Ok(integration::Entity::find_by_id(key.integration_id)
        .one(c)
        .await?
        .map(|i| (key, i)))
}

/// A key of `integration_id` by id (any status but deleted).
pub async fn find_live<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    key_id: Uuid,
) -> Result<Option<api_key::Model>, DbErr> {
    api_key::Entity::find_by_id(key_id)
        .filter(api_key::Column::IntegrationId.eq(integration_id))
        .filter(api_key::Column::Status.ne(ApiKeyStatus::Deleted.as_str()))
        .one(c)
        .await
}

/// Moves a key from the status it was read with to `status`, stamping when and why, only
/// if no concurrent change got there first. `None` when it did (the caller re-reads).
pub async fn transition<C: ConnectionTrait>(
    c: &C,
    key: &api_key::Model,
    status: ApiKeyStatus,
    reason: Option<String>,
    at: DateTime<Utc>,
) -> Result<Option<api_key::Model>, DbErr> {
    use sea_orm::sea_query::Expr;
    let mut q = api_key::Entity::update_many()
        .col_expr(api_key::Column::Status, Expr::value(status.as_str()))
        .col_expr(api_key::Column::StatusReason, Expr::value(reason));
    match status {
        ApiKeyStatus::Inactive => {
            q = q.col_expr(
                api_key::Column::RevokedAt,
                Expr::value(Some(key.revoked_at.unwrap_or(at))),
            )
        }
        ApiKeyStatus::Deleted => q = q.col_expr(api_key::Column::DeletedAt, Expr::value(Some(at))),
        ApiKeyStatus::Active => {}
    }
    let res = q
        .filter(api_key::Column::Id.eq(key.id))
        .filter(api_key::Column::Status.eq(key.status.as_str()))
        .exec(c)
        .await?;
    if res.rows_affected == 0 {
        return Ok(None);
    }
    api_key::Entity::find_by_id(key.id).one(c).await
}

pub struct ListFilter {
    pub status: Option<String>,
    pub branch_id: Option<Uuid>,
    /// Only keys whose id sorts after this one (the cursor).
    pub after: Option<Uuid>,
    /// Only keys minted by this key.
    pub created_by: Option<Uuid>,
    /// Only keys inside this scope.
    pub within: ScopeColumns,
}

/// Keys of an integration, oldest first (ids are time-ordered), deleted ones left out.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    f: &ListFilter,
    limit: u64,
) -> Result<Vec<api_key::Model>, DbErr> {
    use sea_orm::QueryOrder;
    let mut q = api_key::Entity::find()
        .filter(api_key::Column::IntegrationId.eq(integration_id))
        .filter(api_key::Column::Status.ne(ApiKeyStatus::Deleted.as_str()));
    if let Some(s) = &f.status {
        q = q.filter(api_key::Column::Status.eq(s.clone()));
    }
    if let Some(b) = f.branch_id {
        q = q.filter(api_key::Column::BranchId.eq(b));
    }
    if let Some(a) = f.after {
        q = q.filter(api_key::Column::Id.gt(a));
    }
    if let Some(k) = f.created_by {
        q = q.filter(api_key::Column::CreatedByKeyId.eq(k));
    }
    // The scope's most specific level is the one that bounds it.
    let w = &f.within;
    q = match (w.branch_id, w.brand_id, w.enterprise_id) {
        (Some(branch), _, _) => q.filter(api_key::Column::BranchId.eq(branch)),
        (None, Some(brand), _) => q.filter(api_key::Column::BrandId.eq(brand)),
        (None, None, Some(enterprise)) => q.filter(api_key::Column::EnterpriseId.eq(enterprise)),
        (None, None, None) => q,
    };
    q.order_by_asc(api_key::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

/// Keys of an integration (any status but deleted) minted by one of `creators`.
pub async fn minted_by<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    creators: &[Uuid],
) -> Result<Vec<api_key::Model>, DbErr> {
    api_key::Entity::find()
        .filter(api_key::Column::IntegrationId.eq(integration_id))
        .filter(api_key::Column::Status.ne(ApiKeyStatus::Deleted.as_str()))
        .filter(api_key::Column::CreatedByKeyId.is_in(creators.iter().copied()))
        .all(c)
        .await
}

/// Ids of every key of an integration that can still authenticate.
pub async fn ids_of_integration<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
) -> Result<Vec<Uuid>, DbErr> {
    Ok(api_key::Entity::find()
        .filter(api_key::Column::IntegrationId.eq(integration_id))
        .filter(api_key::Column::Status.eq(ApiKeyStatus::Active.as_str()))
        .all(c)
        .await?
        .into_iter()
        .map(|k| k.id)
        .collect())
}
