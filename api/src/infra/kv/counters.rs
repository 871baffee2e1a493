//! Rate-limit state: a fixed-window counter and GCRA, each one key and one script.
use std::time::Duration;

use super::{Kv, scripts::*};
use crate::error::ApiError;

impl Kv {
    /// Counts a hit in a fixed window; returns the count including this hit and the time
    /// left in the window.
    pub async fn incr_window(
        &self,
        key: &str,
        window: Duration,
    ) -> Result<(u64, Duration), ApiError> {
        match self {
            Kv::Local(l) => Ok(l.incr_window(key, window)),
            Kv::Redis(r) => {
                let k = Self::key(r, key);
                let ms = window.as_millis() as u64;
                let (n, ttl): (u64, i64) = Self::run(r, "incr_window", |mut c| async move {
                    script!(INCR_WINDOW)
                        .key(k)
                        .arg(ms)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
                Ok((n, Duration::from_millis(ttl.max(0) as u64)))
            }
        }
    }

    /// One request against a GCRA limit of `window / interval` requests per `window`.
    pub async fn gcra(
        &self,
        key: &str,
        interval: Duration,
        window: Duration,
    ) -> Result<Gcra, ApiError> {
        match self {
            Kv::Local(l) => Ok(l.gcra(key, interval, window)),
            Kv::Redis(r) => {
                // Its own key name since the state moved from ms to µs: a replica of the
                // previous version never reads a µs state as ms during a rolling deploy.
                let k = Self::key(r, &format!("{key}:us"));
                let (i, w) = (
                    (interval.as_micros() as u64).max(1),
                    window.as_micros() as u64,
                );
                let (allowed, retry_after, reset): (i64, i64, i64) =
                    Self::run(r, "gcra", |mut c| async move {
                        script!(GCRA)
                            .key(k)
                            .arg(i)
                            .arg(w)
                            .invoke_async(&mut c)
                            .await
                    })
                    .await?;
                Ok(Gcra {
                    allowed: allowed == 1,
                    retry_after: Duration::from_micros(retry_after.max(0) as u64),
                    reset: Duration::from_micros(reset.max(0) as u64),
                })
            }
        }
    }
}

/// The outcome of one GCRA check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    pub allowed: bool,
    /// When the next request would be allowed (zero when this one was).
    pub retry_after: Duration,
    /// Until the limit is back to its full burst.
    pub reset: Duration,
}
