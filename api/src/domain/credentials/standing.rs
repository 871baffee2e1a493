//! Whether an integration may act, as every replica sees it on its next request.
//!
//! A terminal JWT is checked by its signature alone, so without this a token minted before
//! its integration was suspended kept paying for the rest of its ten minutes. Each JWT
//! request reads the integration's status from the shared key-value store (Redis in
//! production: one round trip), which a status change writes; a miss reads the database,
//! which is the truth, and fills the entry only if no change wrote it meanwhile.
//!
//! The same entry carries a sandbox integration's test clock (`domain::sandbox::clock`), so a terminal
//! request learns the time its rules run at in that one round trip.
//!
//! Revoking or deleting the API key a token was minted from does not end the token: the
//! contract says already-minted JWTs live out their TTL (no revocation list). Suspending
//! the integration is the way to stop its tokens at once.
use std::time::Duration;

use entities::integration::IntegrationStatus;
use uuid::Uuid;

use crate::{domain::sandbox::clock::Clock, error::ApiError, infra::kv::Kv, store};

/// How long an entry is trusted without a change writing it: the bound on staleness for a
/// status changed behind the service's back (by hand in the database).
const ENTRY_TTL: Duration = Duration::from_secs(60);

/// The integration's cached standing: every terminal-token and sandbox request of the
/// integration reads it, so a Redis Cluster node holding it is one the whole integration's
/// terminals depend on (docs/scaling.md, section 3).
pub fn entry(integration_id: Uuid) -> String {
    format!("integration:status:{integration_id}")
}

pub struct Standing<'a> {
    pub db: &'a crate::store::Db,
    pub kv: &'a Kv,
}

/// What the entry holds: the status, and the clock offset when the integration has one
/// ("ACTIVE" or "ACTIVE 86400"); "UNKNOWN" for an integration that does not exist.
fn encode(status: Option<IntegrationStatus>, clock: Clock) -> String {
    let status = status.map_or("UNKNOWN", IntegrationStatus::as_str);
    if clock.is_real() {
        status.to_string()
    } else {
        format!("{status} {}", clock.offset_secs())
    }
}

fn decode(entry: &str) -> (Option<IntegrationStatus>, Clock) {
    match entry.split_once(' ') {
        Some((status, offset)) => (
            IntegrationStatus::parse(status),
            Clock::from_column(offset.parse().ok()),
        ),
        None => (IntegrationStatus::parse(entry), Clock::REAL),
    }
}

impl Standing<'_> {
    /// INVALID_API_KEY unless the integration is ACTIVE, as for an API key whose
    /// integration is not; else the integration's clock.
    pub async fn require_active(&self, integration_id: Uuid) -> Result<Clock, ApiError> {
        let (status, clock) = self.current(integration_id).await?;
        if status == Some(IntegrationStatus::Active) {
            Ok(clock)
        } else {
            Err(ApiError::invalid_api_key())
        }
    }

    /// The integration's clock (real time for an unknown one).
    pub async fn clock(&self, integration_id: Uuid) -> Result<Clock, ApiError> {
        Ok(self.current(integration_id).await?.1)
    }

    async fn current(
        &self,
        integration_id: Uuid,
    ) -> Result<(Option<IntegrationStatus>, Clock), ApiError> {
        let key = entry(integration_id);
        let entry = match self.kv.get(&key).await? {
            Some(s) => s,
            None => {
                let entry = store::tenancy::find_integration(self.db, integration_id)
                    .await?
                    .map_or_else(
                        || encode(None, Clock::REAL),
                        |i| encode(Some(i.status), Clock::from_column(i.clock_offset_secs)),
                    );
                // NX: a change published after our read wins over what we read.
                self.kv.set_nx_px(&key, &entry, ENTRY_TTL).await?;
                entry
            }
        };
        Ok(decode(&entry))
    }

    /// Publishes a status change to every replica. A suspension publishes before it commits
    /// (a failed commit then refuses tokens for at most `ENTRY_TTL`, never admits one), a
    /// reactivation after; either overwrites whatever a request read before. (A clock advance
    /// `forget`s the entry instead: concurrent advances could publish out of order.)
    pub async fn publish(
        &self,
        integration_id: Uuid,
        status: IntegrationStatus,
        clock: Clock,
    ) -> Result<(), ApiError> {
        self.kv
            .set_px(
                &entry(integration_id),
                &encode(Some(status), clock),
                ENTRY_TTL,
            )
            .await
    }

    /// Drops the entry, so the next request reads the database (after a change that
    /// published and then failed to commit).
    pub async fn forget(&self, integration_id: Uuid) -> Result<(), ApiError> {
        self.kv.del(&[entry(integration_id)]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_its_status_and_clock() {
        let active = Some(IntegrationStatus::Active);
        assert_eq!(decode(&encode(active, Clock::REAL)), (active, Clock::REAL));
        let ahead = Clock::ahead_by(90_000);
        assert_eq!(encode(active, ahead), "ACTIVE 90000");
        assert_eq!(decode("ACTIVE 90000"), (active, ahead));
        assert_eq!(
            decode("SUSPENDED"),
            (Some(IntegrationStatus::Suspended), Clock::REAL)
        );
        assert_eq!(encode(None, Clock::REAL), "UNKNOWN");
        assert_eq!(decode("UNKNOWN"), (None, Clock::REAL));
    }
}
