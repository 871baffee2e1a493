//! Upkeep of the monthly partitions (PostgreSQL; `migration::partitions` says which tables
//! and why): the months ahead are created, and an outbox month goes whole once retention
//! allows it. Payments and ledger entries are money records: never dropped.
use chrono::{DateTime, Utc};
use migration::partitions::{self, OUTBOX, Partition};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

pub use migration::partitions::{MONTHS_AHEAD, ensure, partitions_of};

/// The outbox months that ended more than `keep` ago and hold no row still waiting for the
/// relay, detached and dropped; returns the rows they held. A month with a row not yet
/// relayed stays (the relay's backlog is never lost to retention). "Ago" is from the
/// earlier of `now` and the database's clock: a worker whose clock runs ahead never drops
/// a month still in use.
///
/// Detaching is CONCURRENTLY, so payments writing their events never wait for it; it runs
/// outside any transaction (one statement through a transaction-mode pooler too). One that
/// was interrupted is finished first.
pub async fn drop_outbox_before<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
    keep: chrono::Duration,
) -> Result<u64, DbErr> {
    if c.get_database_backend() != DbBackend::Postgres {
        return Ok(0);
    }
    let cutoff = now.min(database_now(c).await?) - keep;
    let mut dropped = 0;
    for p in partitions_of(c, OUTBOX.table).await? {
        if !ended_before(&p, cutoff) {
            continue;
        }
        let t = OUTBOX.table;
        let name = &p.name;
        let (rows, waiting) = census(c, name).await?;
        if waiting > 0 {
            tracing::warn!(
                partition = %name,
                waiting,
                "an outbox month past retention still holds rows the relay has not sent: kept"
            );
            continue;
        }
        let detach = if p.detaching {
            format!("ALTER TABLE {t} DETACH PARTITION {name} FINALIZE")
        } else {
            format!("ALTER TABLE {t} DETACH PARTITION {name} CONCURRENTLY")
        };
        c.execute_unprepared(&detach).await?;
        c.execute_unprepared(&format!("DROP TABLE {name}")).await?;
        tracing::info!(partition = %name, rows, "outbox month past retention dropped");
        dropped += rows;
    }
    Ok(dropped)
}

async fn database_now<C: ConnectionTrait>(c: &C) -> Result<DateTime<Utc>, DbErr> {
    let row = c
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT now() AS now",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("no clock reading".into()))?;
    row.try_get("", "now")
}

/// Whether every row the partition may hold was taken before `cutoff`.
fn ended_before(p: &Partition, cutoff: DateTime<Utc>) -> bool {
    p.upper.is_some_and(|upper| upper <= cutoff)
}

/// (rows, rows not yet relayed) of one outbox partition.
async fn census<C: ConnectionTrait>(c: &C, name: &str) -> Result<(u64, u64), DbErr> {
    // `name` comes from the catalog, and is one of ours: `outbox_p...`.
    debug_assert!(
        name.chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
    );
    let row = c
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT COUNT(*) AS n, COUNT(*) FILTER (WHERE relayed_at IS NULL) AS waiting \
                 FROM {name}"
            ),
        ))
        .await?
        .ok_or_else(|| DbErr::Custom(format!("no count of {name}")))?;
    let n: i64 = row.try_get("", "n")?;
    let waiting: i64 = row.try_get("", "waiting")?;
    Ok((n as u64, waiting as u64))
}

/// Months ahead of `now` each partitioned table has a partition for (the least of them): a
/// gauge the alert on failed upkeep watches.
pub async fn months_ahead<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
) -> Result<Option<u32>, DbErr> {
    if c.get_database_backend() != DbBackend::Postgres {
        return Ok(None);
    }
    let mut least = None;
    for p in partitions::ALL {
        // The months are contiguous: the furthest upper bound says how far they reach.
        let reach = partitions_of(c, p.table)
            .await?
            .into_iter()
            .filter_map(|f| f.upper)
            .max();
        // Month m after the current one is covered when the reach passes its end.
        let ahead = (1..=MONTHS_AHEAD + 1)
            .take_while(|m| reach.is_some_and(|r| r >= partitions::month_start(now, m + 1)))
            .count() as u32;
        least = Some(least.map_or(ahead, |l: u32| l.min(ahead)));
    }
    Ok(least)
}
