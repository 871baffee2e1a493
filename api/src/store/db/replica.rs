//! A streaming replica for the reads that tolerate lag (`WALLET_DATABASE_REPLICA_URL`,
//! docs/scaling.md section 2): the transaction feed and detail, the events feed, and the
//! operations console's pages. Balances, idempotency, authentication and every read a money
//! decision rests on stay on the primary: they never come here.
//!
//! A caller reads its own writes. Every request that may write (any method but GET, HEAD
//! and OPTIONS) notes, once it has run and before its response leaves, the primary's
//! position past everything it committed, under its caller (the integration or operator
//! its credential proved) in Redis, where every API process reads it (`note_write`). A
//! lag-tolerant read by that caller is served by the replica once the replica has replayed
//! that far, waiting for it up to `WALLET_REPLICA_WAIT_MS`, else by the primary. Other
//! callers' writes are what "lag-tolerant" tolerates: a read never waits for them, so a
//! busy primary does not keep a quiet caller off the replica. Replay only moves forward, so
//! every statement of the request then sees at least that much. Both checks are single
//! simple-protocol statements, which a transaction-mode pooler carries as they are.
//!
//! Where Redis cannot say (it is down, or it lost its data lately), the read waits for the
//! primary's current position instead, as if every write were the caller's.
//!
//! Beside that, a probe (`run_probe`) measures the replica's lag every second in WAL it has
//! not replayed: how long ago the primary had written out WAL the replica still lacks. A
//! replica that stopped answering, fell further behind than `WALLET_REPLICA_MAX_LAG_MS` or
//! is no longer a standby (promoted: its history may part from the primary's) is skipped
//! until a probe finds it well again, so requests do not wait on it. A statement that fails
//! on the replica (it went away mid-request, or a query was cancelled by a conflict with
//! recovery) is run again on the primary.
use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use sea_orm::sqlx::{self, Row};
use uuid::Uuid;

use crate::infra::{kv::Kv, telemetry::metrics as m};
use crate::store::db::pooler::Db;

/// How often the probe measures the replica.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long a caller's noted position is kept after its last write. A write older than
/// this was replayed long ago by any replica the probe lets serve (one at most
/// `WALLET_REPLICA_MAX_LAG_MS` behind, which configuration holds to at most 600 s).
pub const NOTE_KEPT: Duration = Duration::from_secs(3_600);

/// The primary's position past every commit that has answered its caller. The flushed
/// position once a commit waits for its flush; the insert position when it does not
/// (`synchronous_commit = off`: the commit answers while its WAL may still be in the
/// primary's buffers, so no flushed or written position covers it yet).
const COMMITTED_POSITION: &str = "SELECT (CASE WHEN current_setting('synchronous_commit') = 'off' \
     THEN pg_current_wal_insert_lsn() ELSE pg_current_wal_flush_lsn() END)::text";

/// Where a lag-tolerant read was served (`meta.capabilities.served_from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    Primary,
    Replica,
}

impl Served {
    pub fn as_str(self) -> &'static str {
        match self {
            Served::Primary => "primary",
            Served::Replica => "replica",
        }
    }
}

/// The database a lag-tolerant read runs on, and which one it is.
#[derive(Clone, Debug)]
pub struct LaggingRead {
    pub db: Db,
    pub served: Served,
}

impl LaggingRead {
    /// Whether a look-up of one thing by its id that failed with `e` should be asked again
    /// of the primary: a miss on the replica. An id learnt from elsewhere (a webhook, an
    /// event, another caller's answer) is never answered NOT_FOUND while the replica is
    /// catching up with it.
    /// Records, when it answers yes, that the request reads the primary.
    pub fn ask_primary_after(&self, e: &crate::error::ApiError) -> bool {
        let missed =
            self.served == Served::Replica && e.code() == crate::error::ErrorCode::NotFound;
        if missed {
            crate::infra::current_request::set_read_primary();
        }
        missed
    }
}

/// A WAL position (PostgreSQL's `pg_lsn`, written `16/B374D848`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lsn(pub u64);

impl Lsn {
    pub fn parse(text: &str) -> Option<Lsn> {
        let (hi, lo) = text.split_once('/')?;
        let (hi, lo) = (
            u32::from_str_radix(hi, 16).ok()?,
            u32::from_str_radix(lo, 16).ok()?,
        );
        Some(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }

    /// PostgreSQL's notation.
    pub fn to_pg(self) -> String {
        format!("{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }

    /// Sixteen hex digits: compared as text, in the order of the positions (how Redis
    /// keeps the greater of two).
    fn fixed_width(self) -> String {
        format!("{:016x}", self.0)
    }

    fn from_fixed_width(text: &str) -> Option<Lsn> {
        (text.len() == 16)
            .then(|| u64::from_str_radix(text, 16).ok())
            .flatten()
            .map(Lsn)
    }
}

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lag {
    /// How long ago the primary had written out WAL the replica has not replayed yet; 0
    /// when it has replayed all the primary had written out. Infinite until a probe of this
    /// process has seen the replica replay past a position it noted.
    pub seconds: f64,
    /// WAL the primary has written out and the replica has not replayed.
    pub bytes: i64,
}

/// The primary's written-out positions as the probe saw them, each with when it was first
/// seen: the replica's lag is the age of the oldest one it has not replayed.
#[derive(Debug, Default)]
pub struct Sightings {
    seen: VecDeque<(Instant, Lsn)>,
    /// When this process first saw the primary's position.
    first: Option<Instant>,
}

impl Sightings {
    /// Notes the primary's position `at`, and keeps what a lag up to `keep` needs.
    pub fn note(&mut self, at: Instant, primary: Lsn, keep: Duration) {
        self.first.get_or_insert(at);
        if self.seen.back().is_none_or(|&(_, last)| primary > last) {
            self.seen.push_back((at, primary));
        }
        // The newest sighting older than `keep` stays: the replica may still lack it, and
        // its age is then a lag this process saw.
        while self.seen.len() > 1 && at.duration_since(self.seen[1].0) > keep {
            self.seen.pop_front();
        }
    }

    /// The lag of a replica that has replayed up to `replayed`, `at`.
    pub fn lag(&self, at: Instant, replayed: Lsn) -> f64 {
        match self.seen.iter().position(|&(_, p)| p > replayed) {
            None => 0.0,
            // Behind the first position this process saw: how far behind is not known.
            Some(0) if self.seen.front().map(|s| s.0) == self.first => f64::INFINITY,
            Some(i) => at.duration_since(self.seen[i].0).as_secs_f64(),
        }
    }
}

/// What a read by a caller must find replayed on the replica.
#[derive(Debug, PartialEq)]
enum MustSee {
    /// Nothing the replica may lack: the caller wrote nothing it has not replayed.
    Nothing,
    Position(Lsn),
    /// Serve it from the primary (Redis cannot say, or the primary did not answer).
    Primary,
}

pub struct Replica {
    /// The replica; a statement that fails on it runs again on the primary.
    db: Db,
    primary: Db,
    kv: Kv,
    /// Whether requests may be served by the replica, as of the last probe.
    usable: Arc<AtomicBool>,
    max_lag: Duration,
    wait: Duration,
    sightings: Mutex<Sightings>,
    /// Until when this process trusts no caller's noted position: a note of its own failed
    /// (Redis did not take it), so a caller's note may be behind its write.
    distrust_until: Mutex<Option<Instant>>,
}

/// The Redis key of a caller's noted position.
fn note_key(caller: Uuid) -> String {
    format!("replica:written:{caller}")
}

/// When Redis began keeping the notes (unix ms): a note lost with Redis' data (a restart,
/// a flush) is only missing, so until every write older than the notes has surely been
/// replayed, a missing note says nothing.
const NOTES_SINCE: &str = "replica:notes-since";

impl Replica {
    pub fn new(replica: Db, primary: Db, kv: Kv, max_lag: Duration, wait: Duration) -> Replica {
        let usable = Arc::new(AtomicBool::new(false));
        Replica {
            db: replica.falling_back_to(primary.clone(), usable.clone()),
            primary,
            kv,
            usable,
            max_lag,
            wait,
            sightings: Mutex::new(Sightings::default()),
            distrust_until: Mutex::new(None),
        }
    }

    /// Whether the last probe let requests use the replica (what `wallet_db_replica_usable`
    /// exports; the gauge is one per process, this is one per replica).
    pub fn usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    /// How long after a write any usable replica has surely replayed it: the lag bound,
    /// the probe's age and one more probe of margin.
    fn settled_after(&self) -> Duration {
        self.max_lag + PROBE_EVERY * 3
    }

    /// The database a lag-tolerant read by `caller` (the request's verified caller, if it
    /// has one) should use now.
    pub async fn read(&self, caller: Option<Uuid>) -> LaggingRead {
        let served = if self.usable.load(Ordering::Relaxed) && self.caught_up(caller).await {
            Served::Replica
        } else {
            Served::Primary
        };
        metrics::counter!(m::DB_LAGGING_READS, "served_from" => served.as_str()).increment(1);
        if served == Served::Primary {
            crate::infra::current_request::set_read_primary();
        }
        LaggingRead {
            db: match served {
                Served::Replica => self.db.clone(),
                Served::Primary => self.primary.clone(),
            },
            served,
        }
    }

    /// Notes, after `caller`'s request has committed what it writes (or read on the
    /// primary), the position the replica must reach before it serves that caller again. Failing that, this process
    /// serves no read from a caller's note until every write of now is surely replayed.
    pub async fn note_write(&self, caller: Uuid) {
        let noted = async {
            let at = self.committed_position().await?;
            self.kv
                .keep_greater(&note_key(caller), &at.fixed_width(), NOTE_KEPT)
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        if let Err(e) = noted {
            tracing::warn!(error = %e, "could not note a write for read-your-writes: this process reads the primary's position for a while");
            *self
                .distrust_until
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + self.settled_after());
        }
    }

    async fn committed_position(&self) -> Result<Lsn, String> {
        let text = position(&self.primary, COMMITTED_POSITION)
            .await
            .map_err(|e| format!("primary: {e}"))?;
        Lsn::parse(&text).ok_or_else(|| format!("primary: unexpected position {text:?}"))
    }

    /// What a read by `caller` must find replayed.
    async fn must_see(&self, caller: Option<Uuid>) -> MustSee {
        let distrusted = self
            .distrust_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|until| Instant::now() < until);
        let from_note = match caller {
            Some(caller) if !distrusted => self.noted(caller).await,
            _ => None,
        };
        match from_note {
            Some(must) => must,
            None => match self.committed_position().await {
                Ok(at) => MustSee::Position(at),
                Err(_) => MustSee::Primary,
            },
        }
    }

    /// What `caller`'s note says it must see, or None when the notes cannot say.
    async fn noted(&self, caller: Uuid) -> Option<MustSee> {
        match self.kv.get(&note_key(caller)).await {
            Ok(Some(v)) => {
                Some(Lsn::from_fixed_width(&v).map_or(MustSee::Primary, MustSee::Position))
            }
            Ok(None) => self.notes_complete().await.then_some(MustSee::Nothing),
            Err(_) => Some(MustSee::Primary),
        }
    }

    /// Whether a missing note means the caller wrote nothing the replica may lack: Redis
    /// has kept the notes for longer than any usable replica takes to replay a write.
    async fn notes_complete(&self) -> bool {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let since = match self.kv.get(NOTES_SINCE).await {
            Ok(Some(v)) => v.parse::<i64>().ok(),
            Ok(None) => {
                // Redis' data is new (or it was never kept): from now on it is.
                let _ = self
                    .kv
                    .set_nx_px(NOTES_SINCE, &now_ms.to_string(), NOTES_SINCE_KEPT)
                    .await;
                return false;
            }
            Err(_) => return false,
        };
        since.is_some_and(|since| {
            now_ms.saturating_sub(since) > self.settled_after().as_millis() as i64
        })
    }

    /// Whether the replica has replayed everything `caller` must see, waiting for it up to
    /// `wait`.
    async fn caught_up(&self, caller: Option<Uuid>) -> bool {
        let lsn = match self.must_see(caller).await {
            MustSee::Nothing => return true,
            MustSee::Primary => return false,
            MustSee::Position(lsn) => lsn,
        };
        let check = format!(
            "SELECT (pg_last_wal_replay_lsn() >= '{}'::pg_lsn)::text",
            lsn.to_pg()
        );
        let until = Instant::now() + self.wait;
        loop {
            match position(&self.db, &check).await.as_deref() {
                Ok("true") => return true,
                Ok(_) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                _ => return false,
            }
        }
    }

    /// Measures the replica's lag, records it and decides whether requests may use it.
    pub async fn probe(&self) -> Result<Lag, String> {
        let found = self.measure().await;
        let usable = matches!(&found, Ok(lag) if lag.seconds <= self.max_lag.as_secs_f64());
        let was = self.usable.swap(usable, Ordering::Relaxed);
        metrics::gauge!(m::DB_REPLICA_USABLE).set(if usable { 1.0 } else { 0.0 });
        match &found {
            Ok(lag) => {
                metrics::gauge!(m::DB_REPLICA_LAG).set(lag.seconds);
                metrics::gauge!(m::DB_REPLICA_LAG_BYTES).set(lag.bytes as f64);
                if was && !usable {
                    tracing::warn!(
                        lag_seconds = lag.seconds,
                        max_lag_ms = self.max_lag.as_millis() as u64,
                        "the read replica fell behind: lag-tolerant reads go to the primary"
                    );
                }
            }
            Err(e) if was => {
                tracing::warn!(error = %e, "the read replica is unavailable: lag-tolerant reads go to the primary");
            }
            Err(_) => {}
        }
        if usable && !was {
            tracing::info!("the read replica serves lag-tolerant reads");
        }
        found
    }

    async fn measure(&self) -> Result<Lag, String> {
        // Written out, not inserted: WAL still in the primary's buffers cannot have been
        // sent, and a record nothing flushes (a page prune after the last commit) would
        // otherwise count as lag for as long as the primary stays quiet.
        let text = position(&self.primary, "SELECT pg_current_wal_flush_lsn()::text")
            .await
            .map_err(|e| format!("primary: {e}"))?;
        let primary =
            Lsn::parse(&text).ok_or_else(|| format!("primary: unexpected position {text:?}"))?;
        let seen_at = Instant::now();
        self.sightings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(seen_at, primary, self.max_lag.max(Duration::from_secs(60)));
        let pool = self.db.connection().get_postgres_connection_pool();
        let row = tokio::time::timeout(
            PROBE_EVERY,
            sqlx::raw_sql(sqlx::AssertSqlSafe(
                "SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS replayed"
                    .to_string(),
            ))
            .fetch_one(pool),
        )
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
        let standby: bool = row.try_get("standby").map_err(|e| e.to_string())?;
        if !standby {
            return Err("not a standby (promoted?): its data may part from the primary's".into());
        }
        let replayed: Option<String> = row.try_get("replayed").map_err(|e| e.to_string())?;
        // Nothing replayed yet since it started: as far behind as can be told.
        let replayed = replayed.as_deref().and_then(Lsn::parse).unwrap_or(Lsn(0));
        let seconds = self
            .sightings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lag(Instant::now(), replayed);
        Ok(Lag {
            seconds,
            bytes: i64::try_from(primary.0.saturating_sub(replayed.0)).unwrap_or(i64::MAX),
        })
    }
}

/// How long Redis keeps `NOTES_SINCE` (renewed by the first read that misses it).
const NOTES_SINCE_KEPT: Duration = Duration::from_secs(30 * 24 * 3_600);

/// One `text` value from a simple-protocol statement on `db`'s pool (a WAL position, a
/// comparison). `sql` is built by this module from constants and server-given positions.
async fn position(db: &Db, sql: &str) -> Result<String, sqlx::Error> {
    let pool = db.connection().get_postgres_connection_pool();
    let row = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(pool)
        .await?;
    let text: Option<String> = row.try_get(0)?;
    let text = text.unwrap_or_default();
    // Only a WAL position (`16/B374D848`) or a boolean is ever interpolated back.
    if text
        .chars()
        .all(|c| c.is_ascii_hexdigit() || c == '/' || c.is_ascii_lowercase())
    {
        Ok(text)
    } else {
        Err(sqlx::Error::Protocol(format!("unexpected value {text:?}")))
    }
}

/// Probes `replica` every `PROBE_EVERY`, for as long as the task runs.
pub async fn run_probe(replica: Arc<Replica>) {
    loop {
        let _ = replica.probe().await;
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_and_compare_as_postgresql_orders_them() {
        let a = Lsn::parse("16/B374D848").unwrap();
        assert_eq!(a, Lsn(0x16_B374_D848));
        assert_eq!(a.to_pg(), "16/B374D848");
        let b = Lsn::parse("17/0").unwrap();
        assert!(a < b);
        // Redis keeps the greater by text order: the fixed width makes it the same order.
        assert!(a.fixed_width() < b.fixed_width());
        assert!("9/0" > "10/0", "PostgreSQL's own notation would not do");
        assert_eq!(Lsn::from_fixed_width(&b.fixed_width()), Some(b));
        assert_eq!(Lsn::parse("16B374D848"), None);
        assert_eq!(Lsn::from_fixed_width("16/B374D848"), None);
    }

    #[test]
    fn lag_is_the_age_of_the_oldest_written_out_wal_the_replica_lacks() {
        let keep = Duration::from_secs(60);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut seen = Sightings::default();
        seen.note(at(0), Lsn(100), keep);
        // A process that just started cannot tell how far behind a replica that lacks the
        // first position it saw is.
        assert_eq!(seen.lag(at(0), Lsn(50)), f64::INFINITY);
        assert_eq!(seen.lag(at(0), Lsn(100)), 0.0);
        seen.note(at(1), Lsn(200), keep);
        seen.note(at(2), Lsn(300), keep);
        // It has what the primary had at 1 s, not what it had at 2 s: 1 s behind at 3 s.
        assert_eq!(seen.lag(at(3), Lsn(250)), 1.0);
        assert_eq!(seen.lag(at(3), Lsn(150)), 2.0);
        assert_eq!(seen.lag(at(3), Lsn(300)), 0.0);
    }

    #[test]
    fn a_quiet_primary_is_no_lag_however_long_ago_its_last_commit() {
        let keep = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut seen = Sightings::default();
        for s in 0..600 {
            seen.note(t0 + Duration::from_secs(s), Lsn(100), keep);
        }
        assert_eq!(seen.lag(t0 + Duration::from_secs(600), Lsn(100)), 0.0);
        // Behind the first position this process saw: not known how far.
        assert_eq!(
            seen.lag(t0 + Duration::from_secs(600), Lsn(90)),
            f64::INFINITY
        );
        seen.note(t0 + Duration::from_secs(601), Lsn(150), keep);
        assert_eq!(seen.lag(t0 + Duration::from_secs(602), Lsn(120)), 1.0);
    }

    #[test]
    fn sightings_older_than_needed_are_dropped_but_the_newest_of_them_stays() {
        let keep = Duration::from_secs(10);
        let t0 = Instant::now();
        let mut seen = Sightings::default();
        for s in 0..100u64 {
            seen.note(t0 + Duration::from_secs(s), Lsn(s + 1), keep);
        }
        assert!(seen.seen.len() <= 12, "{}", seen.seen.len());
        // A replica stuck 50 s back is at least as far behind as the oldest kept sighting.
        let lag = seen.lag(t0 + Duration::from_secs(99), Lsn(50));
        assert!((10.0..=12.0).contains(&lag), "{lag}");
    }
}
