use chrono::Utc;
use entities::{branch, brand, enterprise, integration, integration_enterprise, wallet_program};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    Set,
};
use uuid::Uuid;

pub async fn insert_integration<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    name: &str,
    is_sandbox: bool,
    identify_credential_types: &[&str],
) -> Result<(), DbErr> {
    let now = Utc::now();
    integration::ActiveModel {
        id: Set(id),
        name: Set(name.to_string()),
        status: Set(integration::IntegrationStatus::Active),
        is_sandbox: Set(is_sandbox),
        identify_credential_types: Set(serde_json::json!(identify_credential_types)),
        cors_origins: Set(None),
        clock_offset_secs: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(c)
    .await?;
    Ok(())
}

pub async fn insert_enterprise<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    name: &str,
) -> Result<(), DbErr> {
    enterprise::ActiveModel {
        id: Set(id),
        name: Set(name.to_string()),
        created_at: Set(Utc::now()),
    }
    .insert(c)
    .await?;
    Ok(())
}

pub async fn insert_brand<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    enterprise_id: Uuid,
    name: &str,
) -> Result<(), DbErr> {
    brand::ActiveModel {
        id: Set(id),
        enterprise_id: Set(enterprise_id),
        name: Set(name.to_string()),
        created_at: Set(Utc::now()),
    }
    .insert(c)
    .await?;
    Ok(())
}

pub async fn insert_branch<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    enterprise_id: Uuid,
    brand_id: Uuid,
    name: &str,
) -> Result<(), DbErr> {
    branch::ActiveModel {
        id: Set(id),
        enterprise_id: Set(enterprise_id),
        brand_id: Set(brand_id),
        name: Set(name.to_string()),
        created_at: Set(Utc::now()),
    }
    .insert(c)
    .await?;
    Ok(())
}

pub async fn link_enterprise<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    enterprise_id: Uuid,
) -> Result<(), DbErr> {
    integration_enterprise::ActiveModel {
        integration_id: Set(integration_id),
        enterprise_id: Set(enterprise_id),
        created_at: Set(Utc::now()),
    }
    .insert(c)
    .await?;
    Ok(())
}

pub async fn insert_wallet_program<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    enterprise_id: Uuid,
    name: &str,
    currency: &str,
) -> Result<(), DbErr> {
    wallet_program::ActiveModel {
        id: Set(id),
        enterprise_id: Set(enterprise_id),
        name: Set(name.to_string()),
        currency: Set(currency.to_string()),
        status: Set(wallet_program::WalletProgramStatus::Active),
        created_at: Set(Utc::now()),
    }
    .insert(c)
    .await?;
    Ok(())
}

pub async fn find_integration<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<integration::Model>, DbErr> {
    integration::Entity::find_by_id(id).one(c).await
}

/// The merchants (enterprises) an integration is linked to.
pub async fn linked_enterprises<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
) -> Result<Vec<Uuid>, DbErr> {
    Ok(integration_enterprise::Entity::find()
        .filter(integration_enterprise::Column::IntegrationId.eq(integration_id))
        .order_by_asc(integration_enterprise::Column::CreatedAt)
        .all(c)
        .await?
        .into_iter()
        .map(|l| l.enterprise_id)
        .collect())
}

/// Active wallet programs of the given merchants.
pub async fn active_programs<C: ConnectionTrait>(
    c: &C,
    enterprise_ids: &[Uuid],
) -> Result<Vec<wallet_program::Model>, DbErr> {
    if enterprise_ids.is_empty() {
        return Ok(vec![]);
    }
    wallet_program::Entity::find()
        .filter(wallet_program::Column::EnterpriseId.is_in(enterprise_ids.iter().copied()))
        .filter(
            wallet_program::Column::Status.eq(wallet_program::WalletProgramStatus::Active.as_str()),
        )
        .order_by_asc(wallet_program::Column::CreatedAt)
        .all(c)
        .await
}

pub async fn find_brand<C: ConnectionTrait>(
    c: &C,
    enterprise_id: Uuid,
    brand_id: Uuid,
) -> Result<Option<brand::Model>, DbErr> {
    brand::Entity::find_by_id(brand_id)
        .filter(brand::Column::EnterpriseId.eq(enterprise_id))
        .one(c)
        .await
}

pub async fn find_branch<C: ConnectionTrait>(
    c: &C,
    enterprise_id: Uuid,
    brand_id: Uuid,
    branch_id: Uuid,
) -> Result<Option<branch::Model>, DbErr> {
    branch::Entity::find_by_id(branch_id)
        .filter(branch::Column::EnterpriseId.eq(enterprise_id))
        .filter(branch::Column::BrandId.eq(brand_id))
        .one(c)
        .await
}

/// The ids of a brand's branches.
pub async fn branch_ids_of_brand<C: ConnectionTrait>(
    c: &C,
    brand_id: Uuid,
) -> Result<Vec<Uuid>, DbErr> {
    Ok(branch::Entity::find()
        .filter(branch::Column::BrandId.eq(brand_id))
        .all(c)
        .await?
        .into_iter()
        .map(|b| b.id)
        .collect())
}

pub async fn find_branch_of_enterprise<C: ConnectionTrait>(
    c: &C,
    enterprise_id: Uuid,
    branch_id: Uuid,
) -> Result<Option<branch::Model>, DbErr> {
    branch::Entity::find_by_id(branch_id)
        .filter(branch::Column::EnterpriseId.eq(enterprise_id))
        .one(c)
        .await
}

pub async fn set_integration_status<C: ConnectionTrait>(
    c: &C,
    i: integration::Model,
    status: integration::IntegrationStatus,
) -> Result<integration::Model, DbErr> {
    use sea_orm::IntoActiveModel;
    let mut am = i.into_active_model();
    am.status = Set(status);
    am.updated_at = Set(chrono::Utc::now());
    am.update(c).await
}

pub async fn set_identify_credential_types<C: ConnectionTrait>(
    c: &C,
    i: integration::Model,
    types: &[String],
) -> Result<integration::Model, DbErr> {
    use sea_orm::IntoActiveModel;
    let mut am = i.into_active_model();
    am.identify_credential_types = Set(serde_json::json!(types));
    am.updated_at = Set(chrono::Utc::now());
    am.update(c).await
}

pub async fn set_cors_origins<C: ConnectionTrait>(
    c: &C,
    i: integration::Model,
    origins: &[String],
) -> Result<integration::Model, DbErr> {
    use sea_orm::IntoActiveModel;
    let mut am = i.into_active_model();
    am.cors_origins = Set(Some(serde_json::json!(origins)));
    am.updated_at = Set(chrono::Utc::now());
    am.update(c).await
}

/// Every integration that lists a browser origin, with its list.
pub async fn cors_origins<C: ConnectionTrait>(c: &C) -> Result<Vec<(Uuid, Vec<String>)>, DbErr> {
    let rows = integration::Entity::find()
        .filter(integration::Column::CorsOrigins.is_not_null())
        .all(c)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|i| {
            let list: Vec<String> = serde_json::from_value(i.cors_origins?).ok()?;
            (!list.is_empty()).then_some((i.id, list))
        })
        .collect())
}

/// Locks the program row until the transaction ends: orders concurrent writers of the
/// program's versioned incentive configs.
pub async fn lock_program<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
) -> Result<Option<wallet_program::Model>, DbErr> {
    let q = wallet_program::Entity::find_by_id(id);
    crate::store::for_update(c, q).one(c).await
}

/// Moves an integration's test clock `step_secs` forward in one statement, so two advances
/// at once both count. None when the integration is not a sandbox one or the clock would
/// pass `max_offset_secs`.
pub async fn advance_clock<C: ConnectionTrait>(
    c: &C,
    id: Uuid,
    step_secs: i64,
    max_offset_secs: i64,
) -> Result<Option<integration::Model>, DbErr> {
    use sea_orm::sea_query::{Expr, ExprTrait, Func};
    let current = Expr::expr(Func::coalesce([
        Expr::col(integration::Column::ClockOffsetSecs),
        Expr::val(0i64),
    ]));
    let r = integration::Entity::update_many()
        .col_expr(
            integration::Column::ClockOffsetSecs,
            current.clone().add(step_secs),
        )
        .col_expr(integration::Column::UpdatedAt, Expr::value(Utc::now()))
        .filter(integration::Column::Id.eq(id))
        .filter(integration::Column::IsSandbox.eq(true))
        .filter(current.lte(max_offset_secs - step_secs))
        .exec(c)
        .await?;
    if r.rows_affected == 0 {
        return Ok(None);
    }
    find_integration(c, id).await
}

/// How far ahead the test clock of a merchant's integrations runs, in seconds (the furthest,
/// should several link it; `None` when none runs ahead).
pub async fn clock_offset_of_merchant<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
) -> Result<Option<i64>, DbErr> {
    let integrations: Vec<Uuid> = integration_enterprise::Entity::find()
        .filter(integration_enterprise::Column::EnterpriseId.eq(merchant_id))
        .all(c)
        .await?
        .into_iter()
        .map(|l| l.integration_id)
        .collect();
    if integrations.is_empty() {
        return Ok(None);
    }
    Ok(integration::Entity::find()
        .filter(integration::Column::Id.is_in(integrations))
        .filter(integration::Column::ClockOffsetSecs.gt(0))
        .all(c)
        .await?
        .into_iter()
        .filter_map(|i| i.clock_offset_secs)
        .max())
}

/// The integrations whose test clock runs ahead, with their offsets.
pub async fn advanced_clocks<C: ConnectionTrait>(c: &C) -> Result<Vec<(Uuid, i64)>, DbErr> {
    Ok(integration::Entity::find()
        .filter(integration::Column::ClockOffsetSecs.gt(0))
        .all(c)
        .await?
        .into_iter()
        .filter_map(|i| Some((i.id, i.clock_offset_secs?)))
        .collect())
}

/// Integrations for the operations console, newest first, before the cursor: name
/// containing `q` (any case), in `status`, sandbox or live. A short table (one row per
/// platform), read a page at a time down its primary key.
pub async fn integrations_page<C: ConnectionTrait>(
    c: &C,
    q: Option<&str>,
    status: Option<&str>,
    sandbox: Option<bool>,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<integration::Model>, DbErr> {
    use sea_orm::QuerySelect;
    let mut s = integration::Entity::find();
    if let Some(q) = q {
        s = s.filter(crate::store::contains_any_case(
            integration::Column::Name,
            q,
        ));
    }
    if let Some(v) = status {
        s = s.filter(integration::Column::Status.eq(v));
    }
    if let Some(v) = sandbox {
        s = s.filter(integration::Column::IsSandbox.eq(v));
    }
    if let Some(b) = before {
        s = s.filter(integration::Column::Id.lt(b));
    }
    s.order_by_desc(integration::Column::Id)
        .limit(limit)
        .all(c)
        .await
}

/// Keys per integration and status (`active`, `revoked` ...), for the integrations given.
pub async fn key_counts<C: ConnectionTrait>(
    c: &C,
    integrations: &[Uuid],
) -> Result<Vec<(Uuid, entities::api_key::ApiKeyStatus, i64)>, DbErr> {
    use entities::api_key;
    use sea_orm::QuerySelect;
    api_key::Entity::find()
        .select_only()
        .column(api_key::Column::IntegrationId)
        .column(api_key::Column::Status)
        .column_as(api_key::Column::Id.count(), "n")
        .filter(api_key::Column::IntegrationId.is_in(integrations.iter().copied()))
        .group_by(api_key::Column::IntegrationId)
        .group_by(api_key::Column::Status)
        .into_tuple()
        .all(c)
        .await
}
