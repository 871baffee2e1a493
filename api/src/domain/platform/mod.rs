//! What capabilities report for a credential, computed from the database.
pub mod cells;
pub mod cors;
pub mod currencies;
pub mod tenancy;
use std::time::Duration;

use entities::wallet_program;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::{
    domain::credentials::{CredentialKind, Principal, Scope},
    error::ApiError,
    store,
};

/// Payment credential types `POST /v1/payments` accepts. Empty until the payments issue
/// (#4) mounts the operation: capabilities never promise what is not served.
pub const PAYMENT_CREDENTIAL_TYPES: &[&str] = crate::domain::payments::ENABLED_CREDENTIALS;

/// How long a replica reuses a computed capabilities answer (documented on the operation).
pub const CAPABILITIES_TTL: Duration = Duration::from_secs(5);

/// What a capabilities answer depends on besides the integration's own data: two
/// credentials with the same key get the same answer.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CapabilitiesKey {
    kind: CredentialKind,
    integration_id: Uuid,
    scope: Scope,
    is_sandbox: bool,
}

impl CapabilitiesKey {
    pub fn of(p: &Principal) -> Self {
        CapabilitiesKey {
            kind: p.kind,
            integration_id: p.integration_id,
            scope: p.scope.clone(),
            is_sandbox: p.is_sandbox,
        }
    }
}

pub struct Capabilities {
    pub currencies: Vec<String>,
    pub programs: Vec<wallet_program::Model>,
    pub identify_credential_types: Vec<String>,
    pub payment_credential_types: Vec<String>,
}

/// The merchants a principal may act for.
pub async fn authorized_merchants<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
) -> Result<Vec<Uuid>, ApiError> {
    Ok(match &p.scope {
        Scope::Integration => store::tenancy::linked_enterprises(c, p.integration_id).await?,
        other => other.enterprise_id().into_iter().collect(),
    })
}

pub async fn capabilities<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
) -> Result<Capabilities, ApiError> {
    let integration = store::tenancy::find_integration(c, p.integration_id)
        .await?
        .ok_or_else(ApiError::invalid_api_key)?;
    let merchants = authorized_merchants(c, p).await?;
    let programs = store::tenancy::active_programs(c, &merchants).await?;
    let mut currencies: Vec<String> = programs.iter().map(|p| p.currency.clone()).collect();
    currencies.sort();
    currencies.dedup();
    let identify_credential_types = serde_json::from_value(integration.identify_credential_types)
        .map_err(ApiError::internal)?;
    Ok(Capabilities {
        currencies,
        programs,
        identify_credential_types,
        payment_credential_types: PAYMENT_CREDENTIAL_TYPES
            .iter()
            .map(|s| s.to_string())
            .collect(),
    })
}
