//! What acts on time, in one pass: pending-proof windows lapse, promotional grants expire
//! (their remainder forfeited), armed offers expire and open checkout sessions time out.
//!
//! The periodic sweep runs a pass on real time over every tenant, and one on each advanced
//! test clock (`domain::sandbox::clock`) over its integration's merchants; advancing a clock runs
//! its pass at once. Every step is safe on any number of workers at once (see each
//! `expire_due`), so passes may overlap.
use crate::store::Db;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::{
    domain::{
        customers::enrollment, incentives::grants, incentives::offers, payments::checkout,
        sandbox::clock::Clock,
    },
    error::ApiError,
    store,
};

/// How much one pass ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Ended {
    pub enrollments_lapsed: u64,
    pub grants_expired: u64,
    pub offers_expired: u64,
    pub checkout_sessions_expired: u64,
}

/// Ends what is due at `now`, for `merchants` only when given. A step that fails is
/// logged and the pass goes on: the next pass takes it up again.
pub async fn run(db: &Db, now: DateTime<Utc>, merchants: Option<&[Uuid]>) -> Ended {
    fn count<N: TryInto<u64>>(what: &str, r: Result<N, ApiError>) -> u64 {
        match r {
            Ok(n) => n.try_into().unwrap_or(u64::MAX),
            Err(e) => {
                tracing::warn!(error = %e, "{what} failed");
                0
            }
        }
    }
    Ended {
        enrollments_lapsed: count(
            "lapsing enrollments",
            enrollment::expire_due(db, now, merchants).await,
        ),
        grants_expired: count(
            "expiring grants",
            grants::expire_due(db, now, merchants).await,
        ),
        offers_expired: count(
            "expiring offers",
            offers::expire_due(db, now, merchants).await,
        ),
        checkout_sessions_expired: count(
            "expiring checkout sessions",
            checkout::expire_due(db, now, merchants).await,
        ),
    }
}

/// The pass of one integration's clock, over its merchants.
pub async fn run_for(db: &Db, integration_id: Uuid, clock: Clock) -> Result<Ended, ApiError> {
    let merchants = store::tenancy::linked_enterprises(db, integration_id).await?;
    Ok(run(db, clock.now(), Some(&merchants)).await)
}

/// The sweep's passes: real time over every tenant, then each advanced test clock over its
/// integration's merchants. Returns the totals.
pub async fn run_all(db: &Db) -> Ended {
    let mut total = run(db, Utc::now(), None).await;
    match store::tenancy::advanced_clocks(db).await {
        Ok(clocks) => {
            for (integration_id, offset) in clocks {
                match run_for(db, integration_id, Clock::ahead_by(offset)).await {
                    Ok(e) => total = total.plus(e),
                    Err(e) => {
                        tracing::warn!(error = %e, %integration_id, "a test clock's pass failed")
                    }
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "reading the advanced test clocks failed"),
    }
    total
}

impl Ended {
    fn plus(self, o: Ended) -> Ended {
        Ended {
            enrollments_lapsed: self.enrollments_lapsed + o.enrollments_lapsed,
            grants_expired: self.grants_expired + o.grants_expired,
            offers_expired: self.offers_expired + o.offers_expired,
            checkout_sessions_expired: self.checkout_sessions_expired + o.checkout_sessions_expired,
        }
    }
}
