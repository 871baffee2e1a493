//! What the corrections of a transaction after the fact (disputes, detaching a top-up)
//! share: the merchant rule, and that an open dispute holds the transaction still.
use sea_orm::ConnectionTrait;
use serde_json::json;
use uuid::Uuid;

use crate::domain::transactions::Located;
use crate::{error::ApiError, store};

/// The request's merchant (`context.merchant_id`) must be the transaction's.
pub(crate) fn same_merchant(merchant: Uuid, t: &Located) -> Result<(), ApiError> {
    if t.merchant_id() == merchant {
        Ok(())
    } else {
        Err(ApiError::field(
            "/context/merchant_id",
            "not_the_transactions_merchant",
            "must be the merchant of the transaction in the path",
        ))
    }
}

/// CONFLICT while the transaction has an open dispute.
pub(crate) async fn none_open<C: ConnectionTrait>(c: &C, id: Uuid) -> Result<(), ApiError> {
    let open = store::disputes::of_transaction(c, id)
        .await?
        .into_iter()
        .find(|d| d.status == entities::dispute::DisputeStatus::Open);
    match open {
        None => Ok(()),
        Some(d) => Err(ApiError::conflict(
            "The transaction has an open dispute; resolve it first.",
        )
        .with_details(json!({"dispute_id": d.id.to_string()}))),
    }
}
