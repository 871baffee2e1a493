//! The one check every request with a `context` passes: which merchant and branch the
//! caller acts for. A merchant outside the credential's authority, or a branch outside its
//! scope, is FORBIDDEN with the same body whether or not that merchant or branch exists.
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::credentials::{Principal, Scope};
use crate::{error::ApiError, store};

/// Who a request acts for, once authorized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acting {
    pub merchant_id: Uuid,
    /// The branch the call is for: the context's, or the key's own for a branch key.
    pub branch_id: Option<Uuid>,
    /// Only from a terminal JWT, where it was validated at mint time; a `cashier_id` in the
    /// request context is never trusted.
    pub cashier_id: Option<String>,
}

fn outside() -> ApiError {
    ApiError::forbidden("The credential is not authorized for this merchant or branch.")
}

pub async fn authorize<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    merchant_id: Uuid,
    branch_id: Option<Uuid>,
) -> Result<Acting, ApiError> {
    let merchant_ok = match &p.scope {
        Scope::Integration if !p.linked_merchants.is_empty() => {
            p.linked_merchants.contains(&merchant_id)
        }
        Scope::Integration => store::tenancy::linked_enterprises(c, p.integration_id)
            .await?
            .contains(&merchant_id),
        s => s.enterprise_id() == Some(merchant_id),
    };
    if !merchant_ok {
        return Err(outside());
    }
    let branch = match (&p.scope, branch_id) {
        (Scope::Branch { branch_id: own, .. }, None) => Some(*own),
        (Scope::Branch { branch_id: own, .. }, Some(b)) if b == *own => Some(b),
        (Scope::Branch { .. }, Some(_)) => return Err(outside()),
        (Scope::Brand { brand_id, .. }, Some(b)) => {
            store::tenancy::find_branch(c, merchant_id, *brand_id, b)
                .await?
                .ok_or_else(outside)?;
            Some(b)
        }
        (_, Some(b)) => {
            store::tenancy::find_branch_of_enterprise(c, merchant_id, b)
                .await?
                .ok_or_else(outside)?;
            Some(b)
        }
        (_, None) => None,
    };
    Ok(Acting {
        merchant_id,
        branch_id: branch,
        cashier_id: p.cashier_id.clone(),
    })
}
