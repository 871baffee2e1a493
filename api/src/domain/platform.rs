//! What health and capabilities report, computed from the live dependencies.
use std::time::Duration;

use entities::wallet_program;
use uuid::Uuid;

use crate::{
    config::Mode,
    domain::credentials::{CredentialKind, Principal, Scope},
    error::{ApiError, Subsystem},
    state::AppState,
    store,
};

/// Payment credential types `POST /v1/payments` accepts. Empty until the payments issue
/// (#4) mounts the operation: capabilities never promise what is not served.
pub const PAYMENT_CREDENTIAL_TYPES: &[&str] = super::payments::ENABLED_CREDENTIALS;

const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

pub struct Health {
    pub degraded: Vec<Subsystem>,
    pub mode: &'static str,
}

pub async fn health(state: &AppState) -> Health {
    let (db, redis, queue) = tokio::join!(
        store::ping(&state.db, PROBE_TIMEOUT),
        tokio::time::timeout(PROBE_TIMEOUT, state.kv.ping()),
        tokio::time::timeout(PROBE_TIMEOUT, state.queue.ping()),
    );
    let mut degraded = vec![];
    if db.is_err() {
        degraded.push(Subsystem::Database);
    }
    if !matches!(redis, Ok(Ok(()))) {
        degraded.push(Subsystem::Redis);
    }
    if !matches!(queue, Ok(Ok(()))) {
        degraded.push(Subsystem::Queue);
    }
    for s in [Subsystem::Database, Subsystem::Redis, Subsystem::Queue] {
        metrics::gauge!("subsystem_up", "subsystem" => s.as_str()).set(if degraded.contains(&s) {
            0.0
        } else {
            1.0
        });
    }
    Health {
        degraded,
        mode: match state.config.mode() {
            Mode::Embedded => "embedded",
            Mode::Production => "production",
        },
    }
}

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
pub async fn authorized_merchants(state: &AppState, p: &Principal) -> Result<Vec<Uuid>, ApiError> {
    Ok(match &p.scope {
        Scope::Integration => {
            store::tenancy::linked_enterprises(&state.db, p.integration_id).await?
        }
        other => other.enterprise_id().into_iter().collect(),
    })
}

pub async fn capabilities(state: &AppState, p: &Principal) -> Result<Capabilities, ApiError> {
    let integration = store::tenancy::find_integration(&state.db, p.integration_id)
        .await?
        .ok_or_else(ApiError::invalid_api_key)?;
    let merchants = authorized_merchants(state, p).await?;
    let programs = store::tenancy::active_programs(&state.db, &merchants).await?;
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
