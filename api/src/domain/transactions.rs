//! The reconciliation feed: an integration's wallet payments with their refunds, money
//! classes, basket flags and the events they caused. Scoped to the integration in the path
//! and the key; another integration's transaction is FORBIDDEN (the spec's rule for these
//! reads), an unknown one NOT_FOUND.
use entities::{branch, outbox, payment, payment_refund};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use uuid::Uuid;

use super::credentials::{Principal, Scope};
use crate::{
    error::ApiError,
    store::{self, payments::TransactionFilter},
};

pub const STATUSES: &[&str] = &["completed", "partially_refunded", "refunded", "voided"];

/// A payment's status as the feed reports it.
pub fn status_of(p: &payment::Model) -> &'static str {
    match (p.status.as_str(), p.refunded_minor) {
        ("voided", _) => "voided",
        (_, 0) => "completed",
        (_, r) if r >= p.amount_minor => "refunded",
        _ => "partially_refunded",
    }
}

fn other_integration() -> ApiError {
    ApiError::forbidden("The transactions of another integration are not readable with this key.")
}

/// The path's integration must be the key's.
pub fn check_integration(p: &Principal, integration_id: Uuid) -> Result<(), ApiError> {
    if p.integration_id == integration_id {
        Ok(())
    } else {
        Err(other_integration())
    }
}

/// Narrows the filter to what the key may see (its merchant, brand or branch).
pub async fn bound<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    f: &mut TransactionFilter,
) -> Result<(), ApiError> {
    match p.scope {
        Scope::Integration => {}
        Scope::Enterprise { enterprise_id } => f.merchant_id = Some(enterprise_id),
        Scope::Brand {
            enterprise_id,
            brand_id,
        } => {
            f.merchant_id = Some(enterprise_id);
            let ids = branch::Entity::find()
                .filter(branch::Column::BrandId.eq(brand_id))
                .all(c)
                .await?
                .into_iter()
                .map(|b| b.id)
                .collect();
            f.branch_ids = Some(ids);
        }
        Scope::Branch {
            enterprise_id,
            branch_id,
            ..
        } => {
            f.merchant_id = Some(enterprise_id);
            f.branch_ids = Some(vec![branch_id]);
        }
    }
    Ok(())
}

pub async fn page<C: ConnectionTrait>(
    c: &C,
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<payment::Model>, bool), ApiError> {
    let mut rows = store::payments::transactions_page(c, f, after, limit + 1).await?;
    let more = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    Ok((rows, more))
}

pub struct Detail {
    pub payment: payment::Model,
    pub refunds: Vec<payment_refund::Model>,
    pub events: Vec<outbox::Model>,
}

pub async fn detail<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    integration_id: Uuid,
    id: Uuid,
) -> Result<Detail, ApiError> {
    check_integration(p, integration_id)?;
    let payment = store::payments::find(c, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Transaction"))?;
    if payment.integration_id != integration_id || !super::payments::visible(c, p, &payment).await?
    {
        return Err(other_integration());
    }
    let refunds = store::payments::refunds_of(c, payment.id).await?;
    let events = store::outbox::events_of(c, "payment", &payment.id.to_string()).await?;
    Ok(Detail {
        payment,
        refunds,
        events,
    })
}
