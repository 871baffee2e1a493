//! Writes held back to the end of a transaction and sent together.
//!
//! Most of a mutation's writes need nothing back but a row count: a posting and its entries,
//! the balance moves, the payment row, its events, the idempotency record. On PostgreSQL a
//! batch goes as one statement of data-modifying CTEs, one round trip where it took seven;
//! a busy wallet's row lock is then held for three round trips instead of nine. SQLite runs
//! the same statements one after another, in order, sent in one call.
//!
//! A held-back write is invisible until `flush`: whoever holds a batch flushes it before
//! reading anything it touches. PostgreSQL runs the CTEs of one statement on one snapshot
//! and cannot modify a row twice in one statement, so a write touching a row already
//! touched in the batch starts a new statement.
use entities::resource_sequence;
use sea_orm::{
    ConnectionTrait, DbBackend, DbErr, Statement,
    sea_query::{
        Alias, CommonTableExpression, Expr, InsertStatement, PostgresQueryBuilder, Query,
        ReturningClause, SqliteQueryBuilder, SubQueryStatement, UpdateStatement, WithQuery,
    },
};

use crate::store::outbox::event_batch::Events;

#[derive(Default)]
pub struct Writes {
    items: Vec<Item>,
}

/// A write's place in its batch: where `flush` reports its row count.
#[derive(Clone, Copy, Debug)]
pub struct Slot(usize);

struct Item {
    op: Op,
    /// Rows the write modifies, as `table:key`.
    touches: Vec<String>,
    /// For a write that must modify exactly one row (a guarded balance move): the error
    /// otherwise.
    exactly_one: Option<String>,
}

enum Op {
    Insert(InsertStatement),
    Update(UpdateStatement),
    Events(Events),
}

/// Row counts of a flushed batch, by slot.
#[derive(Debug)]
pub struct Counts(Vec<u64>);

impl Counts {
    pub fn of(&self, slot: Slot) -> u64 {
        self.0[slot.0]
    }
}

impl Writes {
    /// Adds `other`'s writes after these; their slots are not kept (writes held back on a
    /// transaction need nothing back).
    pub fn append(&mut self, other: Writes) {
        self.items.extend(other.items);
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn push(&mut self, op: Op, touches: Vec<String>, exactly_one: Option<String>) -> Slot {
        self.items.push(Item {
            op,
            touches,
            exactly_one,
        });
        Slot(self.items.len() - 1)
    }

    /// An insert of new rows (fresh keys: nothing else in the batch touches them).
    pub fn insert(&mut self, s: InsertStatement) -> Slot {
        self.push(Op::Insert(s), Vec::new(), None)
    }

    /// An insert that may modify an existing row (an upsert) keyed `touches`.
    pub fn upsert(&mut self, s: InsertStatement, touches: String) -> Slot {
        self.push(Op::Insert(s), vec![touches], None)
    }

    /// An update of the one row `touches` that fails the flush with `refused` unless it
    /// modifies exactly that row (its WHERE carries the guard).
    pub fn update_one(&mut self, s: UpdateStatement, touches: String, refused: String) -> Slot {
        self.push(Op::Update(s), vec![touches], Some(refused))
    }

    pub(in crate::store) fn events(&mut self, e: Events) -> Slot {
        let touches = e.touches();
        self.push(Op::Events(e), touches, None)
    }

    /// Runs the batch in the caller's transaction, in order; fails if a guarded write
    /// missed its row.
    pub async fn flush<C: ConnectionTrait>(self, c: &C) -> Result<Counts, DbErr> {
        let mut counts = Vec::with_capacity(self.items.len());
        if c.get_database_backend() == DbBackend::Postgres {
            let mut group: Vec<Item> = Vec::new();
            let mut touched: Vec<String> = Vec::new();
            for item in self.items {
                if item.touches.iter().any(|t| touched.contains(t)) {
                    counts.extend(run_pg(c, std::mem::take(&mut group)).await?);
                    touched.clear();
                }
                touched.extend(item.touches.iter().cloned());
                group.push(item);
            }
            counts.extend(run_pg(c, group).await?);
        } else {
            counts = run_sqlite(c, self.items).await?;
        }
        Ok(Counts(counts))
    }
}

/// A guarded write that missed its row fails the batch; the caller rolls back.
fn checked(n: u64, exactly_one: Option<String>) -> Result<(), DbErr> {
    match exactly_one {
        Some(refused) if n != 1 => Err(DbErr::Custom(refused)),
        _ => Ok(()),
    }
}

/// One call: each write followed by `SELECT changes()`, whose rows come back in order.
/// SQLite runs in process, but every call crosses to the connection's own thread and back
/// (about 0.1 ms under load here), all of it while the file's write turn is held.
async fn run_sqlite<C: ConnectionTrait>(c: &C, items: Vec<Item>) -> Result<Vec<u64>, DbErr> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = String::new();
    let mut values = Vec::new();
    let mut add = |(s, v): (String, sea_orm::sea_query::Values)| {
        sql.push_str(&s);
        sql.push_str(";\n");
        values.extend(v.0);
    };
    let mut guards = Vec::with_capacity(items.len());
    for item in items {
        match item.op {
            Op::Insert(s) => add(s.build(SqliteQueryBuilder)),
            Op::Update(s) => add(s.build(SqliteQueryBuilder)),
            Op::Events(e) => {
                add(e.sequences().build(SqliteQueryBuilder));
                add(e
                    .insert_numbered_from(resource_sequence::Entity)?
                    .build(SqliteQueryBuilder));
            }
        }
        add((
            "SELECT changes() AS n".into(),
            sea_orm::sea_query::Values(Vec::new()),
        ));
        guards.push(item.exactly_one);
    }
    let rows = c
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            sql,
            values,
        ))
        .await?;
    if rows.len() != guards.len() {
        return Err(DbErr::Custom(format!(
            "a batch of {} writes returned {} counts",
            guards.len(),
            rows.len()
        )));
    }
    let mut counts = Vec::with_capacity(rows.len());
    for (row, guard) in rows.into_iter().zip(guards) {
        let n = row.try_get::<i64>("", "n")? as u64;
        checked(n, guard)?;
        counts.push(n);
    }
    Ok(counts)
}

/// One statement: each write a CTE returning a row per row it modified, then their counts.
async fn run_pg<C: ConnectionTrait>(c: &C, items: Vec<Item>) -> Result<Vec<u64>, DbErr> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let (ops, guards): (Vec<Op>, Vec<Option<String>>) =
        items.into_iter().map(|i| (i.op, i.exactly_one)).unzip();
    let one = || ReturningClause::Exprs(vec![Expr::cust("1")]);
    // Built in place: sea-query's builder methods that return an owned statement
    // (`to_owned`, `WithClause::query`) clone the whole tree, every CTE in it.
    let mut with = WithQuery::new();
    let mut counted = Vec::with_capacity(ops.len());
    for (i, op) in ops.into_iter().enumerate() {
        let name = format!("w{i}");
        let query: SubQueryStatement = match op {
            Op::Insert(mut s) => {
                s.returning(one());
                s.into()
            }
            Op::Update(mut s) => {
                s.returning(one());
                s.into()
            }
            Op::Events(e) => {
                // The sequence upsert returns each resource's new last value; the event rows
                // number themselves down from it.
                let seq = format!("s{i}");
                with.cte(cte(&seq, e.sequences_returning().into()));
                let mut insert = e.insert_numbered_from(Alias::new(&seq))?;
                insert.returning(one());
                insert.into()
            }
        };
        with.cte(cte(&name, query));
        counted.push(name);
    }
    let mut select = Query::select();
    for (i, name) in counted.iter().enumerate() {
        select.expr_as(
            Expr::cust(format!("(SELECT COUNT(*) FROM \"{name}\")")),
            Alias::new(format!("n{i}")),
        );
    }
    let (sql, values) = with.query(select).build(PostgresQueryBuilder);
    let row = c
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("a batch of writes returned no counts".into()))?;
    let mut counts = Vec::with_capacity(counted.len());
    for (i, guard) in guards.into_iter().enumerate() {
        let n = row.try_get::<i64>("", &format!("n{i}"))? as u64;
        checked(n, guard)?;
        counts.push(n);
    }
    Ok(counts)
}

fn cte(name: &str, query: SubQueryStatement) -> CommonTableExpression {
    let mut cte = CommonTableExpression::new();
    cte.table_name(Alias::new(name));
    cte.query(query);
    cte
}
