//! Whether an integration may act, as every replica sees it on its next request.
//!
//! A terminal JWT is checked by its signature alone, so without this a token minted before
//! its integration was suspended kept paying for the rest of its ten minutes. Each JWT
//! request reads the integration's status from the shared key-value store (Redis in
//! production: one round trip), which a status change writes; a miss reads the database,
//! which is the truth, and fills the entry only if no change wrote it meanwhile.
//!
//! Revoking or deleting the API key a token was minted from does not end the token: the
//! contract says already-minted JWTs live out their TTL (no revocation list). Suspending
//! the integration is the way to stop its tokens at once.
use std::time::Duration;

use uuid::Uuid;

use crate::{error::ApiError, infra::kv::Kv, store};

pub const ACTIVE: &str = "ACTIVE";

/// How long an entry is trusted without a change writing it: the bound on staleness for a
/// status changed behind the service's back (by hand in the database).
const ENTRY_TTL: Duration = Duration::from_secs(60);

fn entry(integration_id: Uuid) -> String {
    format!("integration:status:{integration_id}")
}

pub struct Standing<'a> {
    pub db: &'a sea_orm::DatabaseConnection,
    pub kv: &'a Kv,
}

impl Standing<'_> {
    /// INVALID_API_KEY unless the integration is ACTIVE, as for an API key whose
    /// integration is not.
    pub async fn require_active(&self, integration_id: Uuid) -> Result<(), ApiError> {
        let key = entry(integration_id);
        let status = match self.kv.get(&key).await? {
            Some(s) => s,
            None => {
                let status = store::tenancy::find_integration(self.db, integration_id)
                    .await?
                    .map_or_else(|| "UNKNOWN".to_string(), |i| i.status);
                // NX: a change published after our read wins over what we read.
                self.kv.set_nx_px(&key, &status, ENTRY_TTL).await?;
                status
            }
        };
        if status == ACTIVE {
            Ok(())
        } else {
            Err(ApiError::invalid_api_key())
        }
    }

    /// Publishes a status change to every replica. A suspension publishes before it
    /// commits (a failed commit then refuses tokens for at most `ENTRY_TTL`, never admits
    /// one), a reactivation after; either overwrites whatever a request read before.
    pub async fn publish(&self, integration_id: Uuid, status: &str) -> Result<(), ApiError> {
        self.kv
            .set_px(&entry(integration_id), status, ENTRY_TTL)
            .await
    }

    /// Drops the entry, so the next request reads the database (after a change that
    /// published and then failed to commit).
    pub async fn forget(&self, integration_id: Uuid) -> Result<(), ApiError> {
        self.kv.del(&[entry(integration_id)]).await
    }
}
