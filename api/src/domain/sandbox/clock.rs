//! The time a tenant's rules run at.
//!
//! A sandbox integration may move its own time forward (a test clock, `POST
//! /sandbox/clock/advance`) to watch grants, enrollments, OTPs, QR nonces, offers and
//! checkout sessions expire without waiting for them. Its clock is real time plus an offset
//! that only grows; a live integration's clock is always real time, because no live key can
//! advance one.
//!
//! The clock is what business rules ask "what time is it?": expiries computed and checked,
//! windows, the times stamped on the records and events those rules write. What protects the
//! service itself keeps real time whatever a tenant's clock says: credential and token
//! lifetimes, idempotency windows, rate limits, webhook signing and delivery.
use chrono::{DateTime, Duration, Utc};

/// Real time, or real time plus a sandbox integration's test-clock offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    offset_secs: i64,
}

/// The most one advance may move a clock: a year and a day.
pub const MAX_STEP_SECS: i64 = 366 * 86_400;
/// How far a test clock may run ahead of real time in all: ten years and ten days, past
/// the longest expiry a grant can have (3650 days).
pub const MAX_OFFSET_SECS: i64 = 3_660 * 86_400;

impl Clock {
    /// Real time.
    pub const REAL: Clock = Clock { offset_secs: 0 };

    /// A clock `offset_secs` ahead of real time (stored offsets: never negative).
    pub fn ahead_by(offset_secs: i64) -> Clock {
        Clock {
            offset_secs: offset_secs.clamp(0, MAX_OFFSET_SECS),
        }
    }

    /// From an integration's stored offset (NULL: real time).
    pub fn from_column(offset_secs: Option<i64>) -> Clock {
        offset_secs.map_or(Clock::REAL, Clock::ahead_by)
    }

    pub fn now(self) -> DateTime<Utc> {
        self.at(Utc::now())
    }

    /// The clock's reading when real time reads `real`.
    pub fn at(self, real: DateTime<Utc>) -> DateTime<Utc> {
        real + Duration::seconds(self.offset_secs)
    }

    pub fn offset_secs(self) -> i64 {
        self.offset_secs
    }

    pub fn is_real(self) -> bool {
        self.offset_secs == 0
    }

    /// The clock moved forward by `step_secs`, or why it cannot be.
    pub fn advanced(self, step_secs: i64) -> Result<Clock, AdvanceRefused> {
        if !(1..=MAX_STEP_SECS).contains(&step_secs) {
            return Err(AdvanceRefused::Step);
        }
        match self.offset_secs.checked_add(step_secs) {
            Some(o) if o <= MAX_OFFSET_SECS => Ok(Clock { offset_secs: o }),
            _ => Err(AdvanceRefused::Total),
        }
    }
}

/// Why a test clock did not move.
#[derive(Debug, PartialEq, Eq)]
pub enum AdvanceRefused {
    /// One step must be 1 s to `MAX_STEP_SECS`.
    Step,
    /// The clock would run more than `MAX_OFFSET_SECS` ahead.
    Total,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_only_moves_forward_within_its_bounds() {
        let c = Clock::REAL.advanced(3600).unwrap();
        assert_eq!(c.offset_secs(), 3600);
        assert_eq!(c.advanced(0), Err(AdvanceRefused::Step));
        assert_eq!(c.advanced(-1), Err(AdvanceRefused::Step));
        assert_eq!(c.advanced(MAX_STEP_SECS + 1), Err(AdvanceRefused::Step));
        let far = Clock::ahead_by(MAX_OFFSET_SECS - 10);
        assert_eq!(far.advanced(11), Err(AdvanceRefused::Total));
        assert_eq!(far.advanced(10).unwrap().offset_secs(), MAX_OFFSET_SECS);
    }

    #[test]
    fn a_clock_reads_real_time_plus_its_offset() {
        let real = Utc::now();
        assert_eq!(Clock::REAL.at(real), real);
        assert_eq!(Clock::from_column(None), Clock::REAL);
        assert_eq!(
            Clock::from_column(Some(86_400)).at(real),
            real + Duration::days(1)
        );
    }
}
