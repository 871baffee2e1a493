//! Per-integration rate limits (GCRA: a burst of the whole limit, then an even rate),
//! shared by every replica through Redis, in-process in embedded mode. Sandbox keys get a
//! higher limit.
use std::time::Duration;

use crate::{
    config::Config,
    error::{ApiError, RateLimitInfo},
    infra::kv::Kv,
};

/// Counts one request of `bucket` (e.g. `validate:<integration>`) against its limit.
/// `Ok` carries the header values; `Err` is RATE_LIMITED with them and `Retry-After`.
pub async fn check(
    kv: &Kv,
    cfg: &Config,
    bucket: &str,
    sandbox: bool,
) -> Result<RateLimitInfo, ApiError> {
    let limit = u64::from(if sandbox {
        cfg.rate_limit_sandbox
    } else {
        cfg.rate_limit
    });
    let window = Duration::from_secs(cfg.rate_limit_window_secs);
    let interval = window / u32::try_from(limit).unwrap_or(u32::MAX).max(1);
    let g = kv.gcra(&format!("rate:{bucket}"), interval, window).await?;
    let interval_ms = interval.as_millis().max(1) as u64;
    let used_ms = g.reset.as_millis() as u64;
    let info = RateLimitInfo {
        limit,
        remaining: (window.as_millis() as u64).saturating_sub(used_ms) / interval_ms,
        reset_secs: g.reset.as_secs_f64().ceil() as u64,
        window_secs: cfg.rate_limit_window_secs,
    };
    if g.allowed {
        Ok(info)
    } else {
        let retry_after = g.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        Err(ApiError::rate_limited(
            RateLimitInfo {
                remaining: 0,
                ..info
            },
            retry_after,
        ))
    }
}
