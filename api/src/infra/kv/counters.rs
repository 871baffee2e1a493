//! Rate-limit state: a fixed-window counter and GCRA, each one key and one script; and
//! trailing windows of failures (a wrong code, a refused credential): each window a log of
//! its failures' times, so a count is exact over the last `length` and a block ends when
//! enough of them have aged out, not at a fixed window's edge. Bounded: a caller at its
//! threshold is refused before it can fail again.
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

/// One window: a key (the windows one call names share a hash tag), how many failures
/// block, over how long.
#[derive(Clone, Debug)]
pub struct FailureWindow {
    pub key: String,
    pub threshold: u64,
    pub length: Duration,
}

/// A window as it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    /// Failures in the window now.
    pub count: u64,
    /// At or past the threshold: how long until the window falls below it again.
    pub blocked_for: Option<Duration>,
}

/// One recorded failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub at: chrono::DateTime<chrono::Utc>,
    pub note: String,
}

impl Kv {
    /// Each window as it stands (expired failures dropped).
    pub async fn failure_tallies(&self, windows: &[FailureWindow]) -> Result<Vec<Tally>, ApiError> {
        self.failure_windows(windows, "").await
    }

    /// Records one failure, described by `note` (no spaces), in every window; each window
    /// as it stands after it.
    pub async fn note_failure(
        &self,
        windows: &[FailureWindow],
        note: &str,
    ) -> Result<Vec<Tally>, ApiError> {
        self.failure_windows(windows, note).await
    }

    async fn failure_windows(
        &self,
        windows: &[FailureWindow],
        note: &str,
    ) -> Result<Vec<Tally>, ApiError> {
        if windows.is_empty() {
            return Ok(vec![]);
        }
        match self {
            Kv::Local(l) => Ok(l.failure_windows(windows, note)),
            Kv::Redis(r) => {
                let mut s = script!(FAILURE_WINDOWS).prepare_invoke();
                s.arg(note);
                for w in windows {
                    s.key(Self::key(r, &w.key))
                        .arg(w.threshold)
                        .arg(w.length.as_micros() as u64);
                }
                let flat: Vec<i64> = Self::run(r, "failure_windows", |mut c| async move {
                    s.invoke_async(&mut c).await
                })
                .await?;
                Ok(flat
                    .chunks(2)
                    .map(|p| Tally {
                        count: p[0].max(0) as u64,
                        blocked_for: (p[1] >= 0).then(|| Duration::from_micros(p[1] as u64)),
                    })
                    .collect())
            }
        }
    }

    /// Empties `window` (an operator cleared its block).
    pub async fn forget_failures(&self, window: &FailureWindow) -> Result<(), ApiError> {
        match self {
            Kv::Local(l) => {
                l.forget_failures(&window.key);
                Ok(())
            }
            Kv::Redis(_) => self.del(std::slice::from_ref(&window.key)).await,
        }
    }

    /// The newest `n` failures in `window`, newest first.
    pub async fn recent_failures(
        &self,
        window: &FailureWindow,
        n: usize,
    ) -> Result<Vec<Failure>, ApiError> {
        let members: Vec<String> = match self {
            Kv::Local(l) => l.recent_failures(window, n),
            Kv::Redis(r) => {
                let k = Self::key(r, &window.key);
                let us = window.length.as_micros() as u64;
                Self::run(r, "recent_failures", |mut c| async move {
                    script!(RECENT_FAILURES)
                        .key(k)
                        .arg(us)
                        .arg(n)
                        .invoke_async(&mut c)
                        .await
                })
                .await?
            }
        };
        Ok(members.iter().filter_map(|m| parse_member(m)).collect())
    }
}

/// A member is `<µs since the epoch> <note>`.
fn parse_member(m: &str) -> Option<Failure> {
    let (us, note) = m.split_once(' ')?;
    Some(Failure {
        at: chrono::DateTime::from_timestamp_micros(us.parse().ok()?)?,
        note: note.to_string(),
    })
}

pub(super) fn member(at_us: i64, note: &str) -> String {
    format!("{at_us} {note}")
}
