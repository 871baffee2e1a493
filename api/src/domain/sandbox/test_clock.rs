//! A sandbox integration's test clock (`domain::sandbox::clock`): read it, move it forward.
//!
//! Only sandbox credentials see it (a live key hears NOT_FOUND, as for the sandbox inbox),
//! and only a platform (integration-wide) key moves it: the clock is the whole
//! integration's, so moving it moves every merchant's time.
use sea_orm::ConnectionTrait;

use crate::{
    domain::{
        credentials::{Principal, Scope},
        sandbox::clock::{AdvanceRefused, Clock, MAX_OFFSET_SECS, MAX_STEP_SECS},
    },
    error::ApiError,
    store,
};

/// NOT_FOUND unless `p` is a sandbox credential.
pub fn sandbox_only(p: &Principal) -> Result<(), ApiError> {
    if p.is_sandbox {
        Ok(())
    } else {
        Err(ApiError::not_found("Resource"))
    }
}

/// Moves `p`'s integration's clock `step_secs` forward, in the caller's transaction.
/// The caller publishes the new clock (`Standing::publish`) once this commits.
pub async fn advance<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    current: Clock,
    step_secs: i64,
) -> Result<(entities::integration::Model, Clock), ApiError> {
    sandbox_only(p)?;
    if p.scope != Scope::Integration {
        return Err(ApiError::forbidden(
            "The test clock is the whole integration's: only a platform (integration-wide) key moves it.",
        ));
    }
    let refused = |r: AdvanceRefused| match r {
        AdvanceRefused::Step => ApiError::field(
            "/seconds",
            "out_of_range",
            format!("must be between 1 and {MAX_STEP_SECS}"),
        ),
        AdvanceRefused::Total => ApiError::field(
            "/seconds",
            "out_of_range",
            format!(
                "the clock would run more than {MAX_OFFSET_SECS} seconds ahead of real time (it is {} ahead)",
                current.offset_secs()
            ),
        ),
    };
    // Checked here for the message; the update re-checks against the row itself.
    current.advanced(step_secs).map_err(refused)?;
    let i = store::tenancy::advance_clock(c, p.integration_id, step_secs, MAX_OFFSET_SECS)
        .await?
        .ok_or_else(|| refused(AdvanceRefused::Total))?;
    let clock = Clock::from_column(i.clock_offset_secs);
    Ok((i, clock))
}

/// The clock of a merchant's rules when no caller's key names the integration (operators'
/// tools): its sandbox integration's test clock, else real time.
pub async fn merchant_clock<C: ConnectionTrait>(
    c: &C,
    merchant_id: uuid::Uuid,
) -> Result<Clock, ApiError> {
    Ok(Clock::from_column(
        store::tenancy::clock_offset_of_merchant(c, merchant_id).await?,
    ))
}
