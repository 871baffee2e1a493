//! Short codes (the QR nonce's 5-character spoken form): failed guesses per integration
//! are counted and capped, so a code cannot be found by trying.
use uuid::Uuid;

use super::SHORT_CODE_FAILURES_PER_MIN;

use crate::{
    error::{ApiError, RateLimitInfo},
    infra::kv::Kv,
};

/// RATE_LIMITED while the integration has too many recent failed short-code payments.
pub async fn short_code_guard(kv: &Kv, integration: Uuid) -> Result<(), ApiError> {
    let count = kv
        .get(&short_code_failures_key(integration))
        .await?
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if count >= SHORT_CODE_FAILURES_PER_MIN {
        return Err(ApiError::rate_limited(
            RateLimitInfo {
                limit: SHORT_CODE_FAILURES_PER_MIN,
                remaining: 0,
                reset_secs: 60,
                window_secs: 60,
            },
            60,
        )
        .with_message("Too many failed short codes; wait, or pay by QR or OTP."));
    }
    Ok(())
}

/// Counts one failed short-code payment of the integration.
pub async fn short_code_failed(kv: &Kv, integration: Uuid) -> Result<(), ApiError> {
    kv.incr_window(
        &short_code_failures_key(integration),
        std::time::Duration::from_secs(60),
    )
    .await
    .map(|_| ())
}

pub(super) fn short_code_failures_key(integration: Uuid) -> String {
    format!("shortcode:fail:{integration}")
}
