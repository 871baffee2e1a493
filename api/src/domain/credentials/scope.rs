//! The one check every request with a `context` passes: which merchant and branch the
//! caller acts for. A merchant outside the credential's authority, or a branch outside its
//! scope, is FORBIDDEN with the same body whether or not that merchant or branch exists.
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::credentials::{Principal, Scope};
use crate::{error::ApiError, store};

/// Who a request acts for, once authenticated and authorized: the acting scope every domain
/// operation that acts for a merchant takes. The authenticated credential itself is the
/// `Principal`.
#[derive(Clone, Debug)]
pub struct Acting {
    pub integration_id: Uuid,
    pub is_sandbox: bool,
    pub merchant_id: Uuid,
    /// The branch the call is for: the context's, or the key's own for a branch key.
    pub branch_id: Option<Uuid>,
    /// Only from a terminal JWT, where it was validated at mint time; a `cashier_id` in the
    /// request context is never trusted.
    pub cashier_id: Option<String>,
    /// The terminal: the one signed into the terminal JWT, else the one the request
    /// context names (recorded, never trusted).
    pub terminal_id: Option<String>,
    /// The till risk controls count this caller as (`Principal::counted_terminal`).
    pub counted_terminal: String,
    /// The correlation id of a decision (identification, payment), the caller's or one the
    /// service issued; kept in the decision's events so support can find it.
    pub decision_trace_id: Option<String>,
    /// The time the caller's rules run at (its integration's test clock in the sandbox).
    pub clock: crate::domain::sandbox::clock::Clock,
}

impl Acting {
    /// Now, by the acting integration's clock.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }
}

/// A terminal JWT minted for one terminal acts for that terminal only: a request context
/// naming another is FORBIDDEN, as a branch outside the scope is. (A token minted without a
/// terminal may name any: it is counted against its key.)
pub fn same_terminal(p: &Principal, named: Option<&str>) -> Result<(), ApiError> {
    match (&p.terminal_id, named) {
        (Some(signed), Some(named)) if signed != named => Err(ApiError::forbidden(
            "The token was minted for another terminal; exchange a token for this one.",
        )),
        _ => Ok(()),
    }
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
        integration_id: p.integration_id,
        is_sandbox: p.is_sandbox,
        merchant_id,
        branch_id: branch,
        cashier_id: p.cashier_id.clone(),
        terminal_id: p.terminal_id.clone(),
        counted_terminal: p.counted_terminal(),
        decision_trace_id: None,
        clock: p.clock(),
    })
}
