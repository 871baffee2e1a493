//! The in-process stand-in for Redis (embedded mode): the same operations on a map under
//! one mutex, with expiry checked on read.
use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use super::{FailureWindow, Gcra, Tally, counters::member};

#[derive(Default)]
pub struct LocalKv {
    pub(super) map: Mutex<HashMap<String, (String, Option<Instant>)>>,
    /// Failure windows: each key's failure times (µs since the epoch), oldest first.
    failures: Mutex<HashMap<String, VecDeque<(i64, String)>>>,
}

impl LocalKv {
    pub(super) fn gcra(&self, key: &str, interval: Duration, window: Duration) -> Gcra {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let epoch = *EPOCH.get_or_init(Instant::now);
        let mut m = self.lock();
        let now = epoch.elapsed().as_millis() as u64;
        let (i, w) = (interval.as_millis() as u64, window.as_millis() as u64);
        let tat = m
            .get(key)
            .filter(|e| Self::live(e))
            .and_then(|e| e.0.parse::<u64>().ok())
            .unwrap_or(now)
            .max(now);
        let new_tat = tat + i;
        let allow_at = new_tat.saturating_sub(w);
        if now < allow_at {
            return Gcra {
                allowed: false,
                retry_after: Duration::from_millis(allow_at - now),
                reset: Duration::from_millis(tat - now),
            };
        }
        m.insert(
            key.to_string(),
            (
                new_tat.to_string(),
                Some(Instant::now() + Duration::from_millis(new_tat - now)),
            ),
        );
        Gcra {
            allowed: true,
            retry_after: Duration::ZERO,
            reset: Duration::from_millis(new_tat - now),
        }
    }

    pub(super) fn live(entry: &(String, Option<Instant>)) -> bool {
        entry.1.is_none_or(|t| t > Instant::now())
    }

    pub(super) fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (String, Option<Instant>)>> {
        // A poisoned map only means another thread panicked mid-update of a cache; the data
        // is still a valid map.
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() > 100_000 {
            m.retain(|_, v| Self::live(v));
        }
        m
    }

    pub(super) fn get(&self, key: &str) -> Option<String> {
        self.lock()
            .get(key)
            .filter(|e| Self::live(e))
            .map(|e| e.0.clone())
    }

    pub(super) fn keep_greater(&self, key: &str, value: &str, ttl: Duration) {
        let mut m = self.lock();
        let kept = m
            .get(key)
            .filter(|e| Self::live(e))
            .map(|e| e.0.clone())
            .filter(|v| v.as_str() >= value)
            .unwrap_or_else(|| value.to_string());
        m.insert(key.to_string(), (kept, Some(Instant::now() + ttl)));
    }

    pub(super) fn set(&self, key: &str, value: &str, ttl: Duration) {
        self.lock().insert(
            key.to_string(),
            (value.to_string(), Some(Instant::now() + ttl)),
        );
    }

    pub(super) fn set_nx(&self, key: &str, value: &str, ttl: Duration) -> bool {
        let mut m = self.lock();
        if m.get(key).is_some_and(Self::live) {
            return false;
        }
        m.insert(
            key.to_string(),
            (value.to_string(), Some(Instant::now() + ttl)),
        );
        true
    }

    pub(super) fn del(&self, key: &str) {
        self.lock().remove(key);
    }

    pub(super) fn extend_if_eq(&self, key: &str, value: &str, ttl: Duration) -> bool {
        let mut m = self.lock();
        match m.get_mut(key) {
            Some(e) if Self::live(e) && e.0 == value => {
                e.1 = Some(Instant::now() + ttl);
                true
            }
            _ => false,
        }
    }

    pub(super) fn del_if_eq(&self, key: &str, value: &str) {
        let mut m = self.lock();
        if m.get(key).is_some_and(|e| e.0 == value) {
            m.remove(key);
        }
    }

    pub(super) fn incr_window(&self, key: &str, window: Duration) -> (u64, Duration) {
        let mut m = self.lock();
        let now = Instant::now();
        let entry = m
            .entry(key.to_string())
            .or_insert_with(|| ("0".into(), Some(now + window)));
        if !Self::live(entry) {
            *entry = ("0".into(), Some(now + window));
        }
        let n: u64 = entry.0.parse().unwrap_or(0) + 1;
        entry.0 = n.to_string();
        let left = entry
            .1
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or(window);
        (n, left)
    }

    pub(super) fn guarded_set(
        &self,
        key: &str,
        value: &str,
        index_key: &str,
        index_value: &str,
        tombstone: &str,
        ttl: Duration,
    ) -> bool {
        let mut m = self.lock();
        if m.get(tombstone).is_some_and(Self::live) {
            return false;
        }
        let exp = Some(Instant::now() + ttl);
        m.insert(key.to_string(), (value.to_string(), exp));
        m.insert(index_key.to_string(), (index_value.to_string(), exp));
        true
    }

    pub(super) fn failure_windows(&self, windows: &[FailureWindow], note: &str) -> Vec<Tally> {
        let now = chrono::Utc::now().timestamp_micros();
        let mut m = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        // Windows nobody failed in for a while go, as Redis lets their keys expire.
        if m.len() > 10_000 {
            m.retain(|_, log| !log.is_empty());
        }
        windows
            .iter()
            .map(|w| {
                let length = w.length.as_micros() as i64;
                let log = m.entry(w.key.clone()).or_default();
                while log.front().is_some_and(|(at, _)| *at <= now - length) {
                    log.pop_front();
                }
                if !note.is_empty() {
                    log.push_back((now, note.to_string()));
                }
                let n = log.len() as u64;
                let blocked_for = (w.threshold > 0 && n >= w.threshold).then(|| {
                    let (at, _) = log[(n - w.threshold) as usize];
                    Duration::from_micros((at + length - now).max(0) as u64)
                });
                Tally {
                    count: n,
                    blocked_for,
                }
            })
            .collect()
    }

    pub(super) fn recent_failures(&self, w: &FailureWindow, n: usize) -> Vec<String> {
        let since = chrono::Utc::now().timestamp_micros() - w.length.as_micros() as i64;
        let m = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&w.key)
            .map(|log| {
                log.iter()
                    .rev()
                    .take_while(|(at, _)| *at > since)
                    .take(n)
                    .map(|(at, note)| member(*at, note))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn forget_failures(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}
