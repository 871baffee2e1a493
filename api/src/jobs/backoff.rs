//! The retry schedule: the wait before attempt n (n >= 2) is `base * 2^(n-2)` (the first
//! retry waits `base`), capped at `max`, with "equal
//! jitter" (a random point in the upper half) so retries of many jobs spread out while the
//! published schedule still bounds each wait.
use std::time::Duration;

pub fn delay_before_attempt(next_attempt: u32, base: Duration, max: Duration) -> Duration {
    let exp = next_attempt.saturating_sub(2).min(30);
    let full = base.saturating_mul(1u32 << exp).min(max);
    let half = full / 2;
    let jitter_ms = rand::random_range(0..=half.as_millis().max(1) as u64);
    half + Duration::from_millis(jitter_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_within_their_jitter_band_and_stop_at_the_cap() {
        let base = Duration::from_secs(2);
        let max = Duration::from_secs(60);
        for (attempt, full) in [
            (2u32, 2u64),
            (3, 4),
            (4, 8),
            (5, 16),
            (6, 32),
            (7, 60),
            (20, 60),
        ] {
            for _ in 0..50 {
                let d = delay_before_attempt(attempt, base, max);
                assert!(
                    d >= Duration::from_secs(full) / 2,
                    "attempt {attempt}: {d:?}"
                );
                assert!(
                    d <= Duration::from_secs(full) + Duration::from_millis(1),
                    "attempt {attempt}: {d:?}"
                );
            }
        }
    }
}
