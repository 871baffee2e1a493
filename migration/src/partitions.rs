//! Time partitions of the history tables on PostgreSQL (SQLite keeps plain tables).
//!
//! Each table is partitioned by RANGE on a UUIDv7 column, whose first 48 bits are the
//! millisecond it was taken: the key that finds a row also names its month, so a look-up by
//! id reads one partition and a newest-first page reads the newest partition first.
//!
//! | table | partition key | primary key |
//! |---|---|---|
//! | payments | id | (id) |
//! | ledger_entries | posting_id (its posting's UUIDv7) | (id, posting_id) |
//! | outbox | event_id | (id, event_id) |
//!
//! One partition per calendar month (UTC), named `<table>_pYYYYMM`; rows from before the
//! tables were partitioned stay in `<table>_p_initial`. `ensure` creates the months ahead;
//! the worker's maintenance pass calls it (and drops what retention allows) every hour.
use chrono::{DateTime, Datelike, TimeZone, Utc};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

/// A partitioned table and its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partitioned {
    pub table: &'static str,
    pub key: &'static str,
    /// The primary key's columns (the partition key among them).
    pub primary_key: &'static [&'static str],
}

pub const PAYMENTS: Partitioned = Partitioned {
    table: "payments",
    key: "id",
    primary_key: &["id"],
};
pub const LEDGER_ENTRIES: Partitioned = Partitioned {
    table: "ledger_entries",
    key: "posting_id",
    primary_key: &["id", "posting_id"],
};
pub const OUTBOX: Partitioned = Partitioned {
    table: "outbox",
    key: "event_id",
    primary_key: &["id", "event_id"],
};
pub const ALL: [Partitioned; 3] = [PAYMENTS, LEDGER_ENTRIES, OUTBOX];

/// Months created ahead of the current one: three monthly passes can fail in a row before
/// a write finds no partition.
pub const MONTHS_AHEAD: u32 = 3;

/// The first instant of the month `months` after the one `t` falls in.
pub fn month_start(t: DateTime<Utc>, months: u32) -> DateTime<Utc> {
    let index = t.year() * 12 + t.month0() as i32 + months as i32;
    Utc.with_ymd_and_hms(
        index.div_euclid(12),
        index.rem_euclid(12) as u32 + 1,
        1,
        0,
        0,
        0,
    )
    .single()
    .expect("the first of a month exists")
}

/// The smallest UUIDv7 of the millisecond `t`: every id taken at or after `t` sorts at or
/// above it (PostgreSQL compares uuids byte by byte, as `Uuid`'s `Ord` does).
pub fn uuid_v7_floor(t: DateTime<Utc>) -> uuid::Uuid {
    let ms = u64::try_from(t.timestamp_millis()).unwrap_or(0) & 0xFFFF_FFFF_FFFF;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = 0x70;
    b[8] = 0x80;
    uuid::Uuid::from_bytes(b)
}

/// `<table>_pYYYYMM`, the partition of the month starting at `start`.
pub fn partition_name(table: &str, start: DateTime<Utc>) -> String {
    format!("{table}_p{:04}{:02}", start.year(), start.month())
}

/// Creates the partitions of the month `now` falls in and of `MONTHS_AHEAD` months after
/// it, where missing; returns the names it created. Several processes may run it at once:
/// they take turns on a transaction-scoped advisory lock. PostgreSQL only.
pub async fn ensure<C: ConnectionTrait>(c: &C, now: DateTime<Utc>) -> Result<Vec<String>, DbErr> {
    if c.get_database_backend() != DbBackend::Postgres {
        return Ok(Vec::new());
    }
    let mut created = Vec::new();
    for p in ALL {
        let existing = partitions_of(c, p.table).await?;
        if existing.is_empty() {
            // Not partitioned (yet): the migration that converts it calls this again.
            continue;
        }
        let initial = format!("{}_p_initial", p.table);
        let covered = existing
            .iter()
            .find(|e| e.name == initial)
            .and_then(|e| e.upper);
        for m in 0..=MONTHS_AHEAD {
            let start = month_start(now, m);
            let name = partition_name(p.table, start);
            // A month below the initial partition's bound is its rows' already.
            if existing.iter().any(|e| e.name == name)
                || covered.is_some_and(|c| c >= month_start(now, m + 1))
            {
                continue;
            }
            // The initial partition ends at a month's start: a month is its or wholly free.
            create(c, p, &name, start, month_start(now, m + 1)).await?;
            created.push(name);
        }
    }
    Ok(created)
}

/// A partition of `p` for `[from, to)`, made as a plain table and then attached: attaching
/// locks the parent only against other schema changes (SHARE UPDATE EXCLUSIVE), where
/// `CREATE TABLE .. PARTITION OF` would stop every payment while it waits for the lock.
async fn create<C: ConnectionTrait>(
    c: &C,
    p: Partitioned,
    name: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), DbErr> {
    let (lo, hi) = (uuid_v7_floor(from), uuid_v7_floor(to));
    let t = p.table;
    let k = p.key;
    // One statement, so it is one transaction through a transaction-mode pooler too.
    let sql = format!(
        "DO $$ BEGIN \
           PERFORM set_config('lock_timeout', '5s', true); \
           PERFORM pg_advisory_xact_lock(hashtext('wallet partitions {t}')); \
           IF NOT EXISTS (SELECT 1 FROM pg_class WHERE relname = '{name}' \
                          AND relnamespace = current_schema()::regnamespace) THEN \
             CREATE TABLE {name} (LIKE {t} INCLUDING DEFAULTS); \
             ALTER TABLE {name} ADD CONSTRAINT {name}_bounds \
               CHECK ({k} IS NOT NULL AND {k} >= '{lo}' AND {k} < '{hi}'); \
             ALTER TABLE {t} ATTACH PARTITION {name} FOR VALUES FROM ('{lo}') TO ('{hi}'); \
             ALTER TABLE {name} DROP CONSTRAINT {name}_bounds; \
           END IF; \
         END $$"
    );
    c.execute_unprepared(&sql).await?;
    name_indexes_of(c, t, name).await
}

/// Names each partition's copy of an index after the parent's (`ix_payments_wallet_id_p202612`,
/// `…_initial`), so a query plan says which index served it: for a migration that adds an
/// index to a partitioned table, whose copies PostgreSQL names on its own. Nothing to do on
/// SQLite, whose tables are not partitioned.
pub async fn name_partition_indexes<C: ConnectionTrait>(c: &C, table: &str) -> Result<(), DbErr> {
    if c.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    for p in partitions_of(c, table).await? {
        name_indexes_of(c, table, &p.name).await?;
    }
    Ok(())
}

/// Renames the indexes of `table`'s partition `partition` that do not yet carry their
/// parent index's name and the partition's suffix (`_p202612`, `_initial`).
async fn name_indexes_of<C: ConnectionTrait>(
    c: &C,
    table: &str,
    partition: &str,
) -> Result<(), DbErr> {
    let suffix = match &partition[table.len()..] {
        "_p_initial" => "_initial",
        s => s,
    };
    let room = 63 - suffix.len();
    c.execute_unprepared(&format!(
        "DO $$ DECLARE r record; BEGIN \
           FOR r IN SELECT c.relname AS child, p.relname AS parent FROM pg_inherits i \
             JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
             JOIN pg_index x ON x.indexrelid = c.oid WHERE x.indrelid = '{partition}'::regclass \
               AND c.relname <> left(p.relname, {room}) || '{suffix}' LOOP \
             EXECUTE format('ALTER INDEX %I RENAME TO %I', r.child, \
               left(r.parent, {room}) || '{suffix}'); \
           END LOOP; END $$"
    ))
    .await
    .map(|_| ())
}

/// One partition as the catalog describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// Where its range ends (exclusive): the instant of its upper bound's UUIDv7.
    pub upper: Option<DateTime<Utc>>,
    /// A `DETACH .. CONCURRENTLY` that did not finish.
    pub detaching: bool,
}

/// The partitions of `table` (attached, or detaching), by name.
pub async fn partitions_of<C: ConnectionTrait>(
    c: &C,
    table: &str,
) -> Result<Vec<Partition>, DbErr> {
    let rows = c
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT child.relname::text AS name, i.inhdetachpending AS detaching, \
               substring(pg_get_expr(child.relpartbound, child.oid) \
                 from 'TO \\(''([0-9a-f-]+)''\\)') AS hi \
             FROM pg_inherits i \
             JOIN pg_class child ON child.oid = i.inhrelid \
             JOIN pg_class parent ON parent.oid = i.inhparent \
             WHERE parent.relname = $1 \
               AND parent.relnamespace = current_schema()::regnamespace \
             ORDER BY child.relname",
            [table.into()],
        ))
        .await?;
    let mut found = Vec::with_capacity(rows.len());
    for r in rows {
        let hi: Option<String> = r.try_get("", "hi")?;
        found.push(Partition {
            name: r.try_get("", "name")?,
            upper: hi.as_deref().and_then(v7_instant),
            detaching: r.try_get("", "detaching")?,
        });
    }
    Ok(found)
}

/// The millisecond a UUIDv7 (as text) was taken.
fn v7_instant(text: &str) -> Option<DateTime<Utc>> {
    let id = uuid::Uuid::parse_str(text).ok()?;
    let ms = id.as_bytes()[..6]
        .iter()
        .fold(0i64, |acc, b| (acc << 8) | i64::from(*b));
    Utc.timestamp_millis_opt(ms).single()
}

/// Turns the plain table `p.table` into one partitioned by `p.key`, its rows (all taken
/// before `now`'s next month) staying where they are as the partition `<table>_p_initial`,
/// then creates the months after it. Every index and constraint the table had, the parent
/// has too (the primary key widened to `p.primary_key`).
pub async fn convert<C: ConnectionTrait>(
    c: &C,
    p: Partitioned,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let t = p.table;
    let initial = format!("{t}_p_initial");
    if is_partitioned(c, t).await? {
        return ensure(c, now).await.map(|_| ());
    }
    let hi = uuid_v7_floor(month_start(now, 1));
    let indexes = indexes_of(c, t).await?;
    let primary_key = format!("PRIMARY KEY ({})", p.primary_key.join(", "));
    let mut plain = Vec::new();
    let mut uniques = Vec::new();
    let mut sql = vec![format!("ALTER TABLE {t} RENAME TO {initial}")];
    for Index {
        name,
        def,
        contype,
        condef,
    } in indexes
    {
        match contype.as_deref() {
            // A widened primary key is built anew on the partition as it is attached.
            Some("p") if condef.as_deref() != Some(primary_key.as_str()) => {
                sql.push(format!("ALTER TABLE {initial} DROP CONSTRAINT {name}"));
            }
            Some(_) => {
                sql.push(format!(
                    "ALTER TABLE {initial} RENAME CONSTRAINT {name} TO {}",
                    renamed(&name)
                ));
                if contype.as_deref() == Some("u") {
                    uniques.push((name, condef.unwrap_or_default()));
                }
            }
            None => {
                sql.push(format!("ALTER INDEX {name} RENAME TO {}", renamed(&name)));
                plain.push(def);
            }
        }
    }
    sql.push(format!(
        "CREATE TABLE {t} (LIKE {initial} INCLUDING DEFAULTS) PARTITION BY RANGE ({})",
        p.key
    ));
    sql.push(format!(
        "ALTER TABLE {t} ADD CONSTRAINT {t}_pkey {primary_key}"
    ));
    for (name, def) in uniques {
        sql.push(format!("ALTER TABLE {t} ADD CONSTRAINT {name} {def}"));
    }
    // The definitions name the table as it was, which the new parent now is.
    sql.extend(plain);
    // PostgreSQL 15 has no identity columns on a partitioned table: an identity column of
    // the table becomes a plain sequence default on the parent (owned by it, not by a
    // partition retention may drop), carrying on from the last value handed out.
    sql.push(format!(
        "DO $$ DECLARE col text; seq text; last bigint; called boolean; BEGIN \
           FOR col IN SELECT a.attname FROM pg_attribute a \
             WHERE a.attrelid = '{initial}'::regclass AND a.attidentity <> '' LOOP \
             seq := pg_get_serial_sequence('{initial}', col); \
             EXECUTE format('SELECT last_value, is_called FROM %s', seq) INTO last, called; \
             EXECUTE format('ALTER TABLE {initial} ALTER COLUMN %I DROP IDENTITY', col); \
             EXECUTE format('CREATE SEQUENCE %I OWNED BY {t}.%I', '{t}_' || col || '_seq', col); \
             PERFORM setval(quote_ident('{t}_' || col || '_seq'), last, called); \
             EXECUTE format('ALTER TABLE {t} ALTER COLUMN %I SET DEFAULT nextval(%L)', \
               col, '{t}_' || col || '_seq'); \
           END LOOP; END $$"
    ));
    // Checked first, so attaching need not scan the rows again under its lock.
    sql.push(format!(
        "ALTER TABLE {initial} ADD CONSTRAINT {initial}_bounds \
         CHECK ({k} IS NOT NULL AND {k} < '{hi}')",
        k = p.key
    ));
    sql.push(format!(
        "ALTER TABLE {t} ATTACH PARTITION {initial} FOR VALUES FROM (MINVALUE) TO ('{hi}')"
    ));
    sql.push(format!(
        "ALTER TABLE {initial} DROP CONSTRAINT {initial}_bounds"
    ));
    for s in sql {
        c.execute_unprepared(&s).await?;
    }
    ensure(c, now).await?;
    Ok(())
}

/// Turns the partitioned `p.table` back into one plain table with every row (the
/// migration's `down`).
pub async fn unconvert<C: ConnectionTrait>(
    c: &C,
    p: Partitioned,
    original_pk: &[&str],
) -> Result<(), DbErr> {
    let t = p.table;
    let flat = format!("{t}_flat");
    let indexes = indexes_of(c, t).await?;
    let mut sql = vec![
        format!("CREATE TABLE {flat} (LIKE {t} INCLUDING DEFAULTS)"),
        format!("INSERT INTO {flat} SELECT * FROM {t}"),
        format!(
            "DO $$ DECLARE s text; BEGIN \
               FOR s IN SELECT a.attname FROM pg_attribute a \
                 WHERE a.attrelid = '{t}'::regclass AND a.attnum > 0 AND NOT a.attisdropped \
                   AND pg_get_serial_sequence('{t}', a.attname) IS NOT NULL LOOP \
                 EXECUTE format('ALTER SEQUENCE %s OWNED BY {flat}.%I', \
                   pg_get_serial_sequence('{t}', s), s); \
               END LOOP; END $$"
        ),
        format!("DROP TABLE {t}"),
        format!("ALTER TABLE {flat} RENAME TO {t}"),
        format!(
            "ALTER TABLE {t} ADD CONSTRAINT {t}_pkey PRIMARY KEY ({})",
            original_pk.join(", ")
        ),
    ];
    for Index {
        name,
        def,
        contype,
        condef,
    } in indexes
    {
        match contype.as_deref() {
            Some("p") => {}
            Some(_) => sql.push(format!(
                "ALTER TABLE {t} ADD CONSTRAINT {name} {}",
                condef.unwrap_or_default()
            )),
            None => sql.push(def.replace(" ONLY ", " ")),
        }
    }
    for s in sql {
        c.execute_unprepared(&s).await?;
    }
    Ok(())
}

/// One index of a table, with the constraint it backs, if any, as it is defined now.
struct Index {
    name: String,
    /// `CREATE INDEX ..`
    def: String,
    /// `p` (primary key) or `u` (unique), for a constraint's index.
    contype: Option<String>,
    /// `PRIMARY KEY (..)`, `UNIQUE (..)`
    condef: Option<String>,
}

async fn indexes_of<C: ConnectionTrait>(c: &C, table: &str) -> Result<Vec<Index>, DbErr> {
    let rows = c
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT i.relname::text AS name, pg_get_indexdef(i.oid) AS def, \
                   con.contype::text AS contype, pg_get_constraintdef(con.oid) AS condef \
                 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid \
                 LEFT JOIN pg_constraint con ON con.conindid = x.indexrelid \
                   AND con.conrelid = x.indrelid \
                 WHERE x.indrelid = '{table}'::regclass ORDER BY i.relname"
            ),
        ))
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Index {
                name: r.try_get("", "name")?,
                def: r.try_get("", "def")?,
                contype: r.try_get("", "contype")?,
                condef: r.try_get("", "condef")?,
            })
        })
        .collect()
}

/// Whether `table` is partitioned already.
pub async fn is_partitioned<C: ConnectionTrait>(c: &C, table: &str) -> Result<bool, DbErr> {
    let row = c
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT (relkind = 'p') AS partitioned FROM pg_class \
             WHERE relname = $1 AND relnamespace = current_schema()::regnamespace",
            [table.into()],
        ))
        .await?;
    Ok(match row {
        Some(r) => r.try_get("", "partitioned")?,
        None => false,
    })
}

/// The name an index or constraint of the initial partition takes, freeing its own for the
/// parent's (63 bytes at most, as PostgreSQL's names are).
fn renamed(name: &str) -> String {
    let suffix = "_initial";
    let keep = name.len().min(63 - suffix.len());
    format!("{}{suffix}", &name[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_roll_over_the_year() {
        let t = Utc.with_ymd_and_hms(2026, 11, 28, 9, 0, 0).unwrap();
        assert_eq!(
            month_start(t, 0),
            Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
        );
        assert_eq!(
            month_start(t, 2),
            Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap()
        );
        assert_eq!(
            month_start(t, 14),
            Utc.with_ymd_and_hms(2028, 1, 1, 0, 0, 0).unwrap()
        );
        assert_eq!(
            partition_name("payments", month_start(t, 1)),
            "payments_p202612"
        );
    }

    #[test]
    fn every_id_of_a_month_sorts_inside_its_bounds() {
        let start = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let end = month_start(start, 1);
        let first = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            start.timestamp() as u64,
            0,
        ));
        let last = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            end.timestamp() as u64 - 1,
            999_999_999,
        ));
        let (lo, hi) = (uuid_v7_floor(start), uuid_v7_floor(end));
        assert!(lo <= first && first < hi);
        assert!(lo <= last && last < hi);
    }
}
