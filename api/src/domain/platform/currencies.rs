//! The currencies a merchant runs programs in, and the rule that a request's currency must
//! be one of them. A leaf every domain module may use.
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::{error::ApiError, store};

/// The currencies the merchant's active programs run in.
pub async fn supported_currencies<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
) -> Result<Vec<String>, ApiError> {
    let mut cs: Vec<String> = store::tenancy::active_programs(c, &[merchant_id])
        .await?
        .into_iter()
        .map(|p| p.currency)
        .collect();
    cs.sort();
    cs.dedup();
    Ok(cs)
}

/// CURRENCY_NOT_SUPPORTED unless one of the merchant's active programs runs in `currency`.
pub async fn require_currency<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    currency: &str,
) -> Result<(), ApiError> {
    let supported = supported_currencies(c, merchant_id).await?;
    if supported.iter().any(|s| s == currency) {
        Ok(())
    } else {
        Err(ApiError::currency_not_supported(&supported))
    }
}
