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
//!
//! The statement is put together as text: each write's own SQL (a template's, rendered once
//! per shape, or sea-query's of the write) with its placeholders renumbered, so the writes
//! every payment makes are not built and rendered again per payment.

use sea_orm::{
    ActiveModelTrait, ActiveValue, ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityName,
    EntityTrait, Iterable, QueryTrait, Statement,
    sea_query::{Expr, InsertStatement, Query, UpdateStatement, Value, Values},
};

use crate::store::{
    db::template::{Args, Bound, Fragment, Shape, Template, built, push_number},
    outbox::event_batch::Events,
};

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
    Write(Write),
    Events(Events),
}

/// An insert or an update: built by sea-query, or a template's (rendered once per shape).
/// A sea-query statement is boxed: it is ten times a template's size, and the writes every
/// payment holds are templates.
pub enum Write {
    Insert(Box<InsertStatement>),
    Update(Box<UpdateStatement>),
    Bound(Bound),
}

impl From<InsertStatement> for Write {
    fn from(s: InsertStatement) -> Self {
        Write::Insert(Box::new(s))
    }
}

impl From<UpdateStatement> for Write {
    fn from(s: UpdateStatement) -> Self {
        Write::Update(Box::new(s))
    }
}

impl From<Bound> for Write {
    fn from(b: Bound) -> Self {
        Write::Bound(b)
    }
}

impl Write {
    fn fragment(self, backend: DbBackend) -> Result<Fragment, DbErr> {
        match self {
            Write::Insert(s) => Ok(Fragment::of(backend, built(&*s, backend))),
            Write::Update(s) => Ok(Fragment::of(backend, built(&*s, backend))),
            Write::Bound(b) => b.fragment(backend),
        }
    }
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
    pub fn insert(&mut self, s: impl Into<Write>) -> Slot {
        self.push(Op::Write(s.into()), Vec::new(), None)
    }

    /// An insert of new rows, as sea-orm's `Entity::insert_many` makes it, through
    /// `template` (one per call site): its text is rendered once per number of rows (up to
    /// `SHAPES`) and set of columns the rows set. Rows that set different columns are built
    /// directly.
    pub fn insert_rows<A: ActiveModelTrait>(
        &mut self,
        template: &'static Template,
        rows: Vec<A>,
    ) -> Slot {
        self.insert(bind_rows(template, rows))
    }

    /// An insert that may modify an existing row (an upsert) keyed `touches`.
    pub fn upsert(&mut self, s: impl Into<Write>, touches: String) -> Slot {
        self.push(Op::Write(s.into()), vec![touches], None)
    }

    /// An update of the one row `touches` that fails the flush with `refused` unless it
    /// modifies exactly that row (its WHERE carries the guard).
    pub fn update_one(&mut self, s: impl Into<Write>, touches: String, refused: String) -> Slot {
        self.push(Op::Write(s.into()), vec![touches], Some(refused))
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

fn bind_rows<A: ActiveModelTrait>(template: &'static Template, rows: Vec<A>) -> Write {
    let columns = <A::Entity as EntityTrait>::Column::iter;
    let set = |row: &A| {
        columns()
            .enumerate()
            .filter(|(_, c)| !row.is_not_set(*c))
            .fold(0u64, |mask, (i, _)| mask | 1 << i)
    };
    let direct = |rows: Vec<A>| {
        <A::Entity as EntityTrait>::insert_many(rows)
            .into_query()
            .into()
    };
    if rows.is_empty() || columns().count() > 64 {
        return direct(rows);
    }
    let key = set(&rows[0]);
    if rows[1..].iter().any(|r| set(r) != key) {
        return direct(rows);
    }
    let shape = Shape {
        index: rows.len() - 1,
        key,
    };
    let mut args = Vec::with_capacity(rows.len() * key.count_ones() as usize);
    for mut row in rows {
        for (i, c) in columns().enumerate() {
            if key & 1 << i != 0
                && let ActiveValue::Set(v) | ActiveValue::Unchanged(v) = row.take(c)
            {
                args.push(v);
            }
        }
    }
    template.bind(shape, args, build_rows::<A>).into()
}

/// The insert `bind_rows` binds: the columns of `shape.key`, a row per so many arguments.
fn build_rows<A: ActiveModelTrait>(backend: DbBackend, shape: Shape, a: &Args) -> (String, Values) {
    let columns: Vec<_> = <A::Entity as EntityTrait>::Column::iter()
        .enumerate()
        .filter(|(i, _)| shape.key & 1 << i != 0)
        .map(|(_, c)| c)
        .collect();
    let mut q = Query::insert();
    q.into_table(A::Entity::default().table_ref())
        .columns(columns.iter().copied());
    for row in 0..a.count() / columns.len().max(1) {
        q.values_panic(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| c.save_as(Expr::val(a.get(row * columns.len() + i)))),
        );
    }
    built(&q, backend)
}

#[cfg(test)]
impl Writes {
    /// Each write's SQL and values on `backend`, as they go into a batch.
    pub fn texts(self, backend: DbBackend) -> Vec<(String, Vec<Value>)> {
        self.items
            .into_iter()
            .filter_map(|i| match i.op {
                Op::Write(w) => Some(w.fragment(backend).unwrap().text()),
                Op::Events(_) => None,
            })
            .collect()
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
    let mut guards = Vec::with_capacity(items.len());
    for item in items {
        let mut add = |f: Fragment| {
            f.append_to(&mut sql, &mut values);
            sql.push_str(";\n");
        };
        match item.op {
            Op::Write(w) => add(w.fragment(DbBackend::Sqlite)?),
            Op::Events(e) => {
                add(e.sequences().fragment(DbBackend::Sqlite)?);
                add(e.rows().fragment(DbBackend::Sqlite)?);
            }
        }
        sql.push_str("SELECT changes() AS n;\n");
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
    let pg = DbBackend::Postgres;
    // A payment's batch is about 3 KB of SQL: one allocation, not a dozen as it grows.
    let mut sql = String::with_capacity(4096);
    sql.push_str("WITH");
    let mut values: Vec<Value> = Vec::new();
    let mut guards = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let (write, reads) = match item.op {
            Op::Write(w) => (w.fragment(pg)?, None),
            Op::Events(e) => {
                // The sequence upsert returns each resource's new last value; the event rows
                // number themselves down from it.
                let sequences = e.sequences().fragment(pg)?;
                cte(&mut sql, ("s", i), &mut values, sequences, "", None);
                (e.rows().fragment(pg)?, Some(i))
            }
        };
        cte(
            &mut sql,
            ("w", i),
            &mut values,
            write,
            " RETURNING 1",
            reads,
        );
        guards.push(item.exactly_one);
    }
    sql.push_str(" SELECT ");
    for i in 0..guards.len() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str("(SELECT COUNT(*) FROM \"w");
        push_number(&mut sql, i);
        sql.push_str("\")");
    }
    let row = c
        .query_one_raw(Statement::from_sql_and_values(pg, sql, values))
        .await?
        .ok_or_else(|| DbErr::Custom("a batch of writes returned no counts".into()))?;
    let mut counts = Vec::with_capacity(guards.len());
    for (i, guard) in guards.into_iter().enumerate() {
        // The counts in the order of the writes: read by position, not by a name built
        // for each.
        let n = row.try_get_by_index::<i64>(i)? as u64;
        checked(n, guard)?;
        counts.push(n);
    }
    Ok(counts)
}

/// Appends `"<name>" AS (statement)` to the WITH clause in `sql`, the statement followed by
/// `returning` and reading the events' counters `"s<reads>"` where its template says
/// `template::NAME`. A name is a letter and the write's place in the batch.
fn cte(
    sql: &mut String,
    (letter, i): (&str, usize),
    values: &mut Vec<Value>,
    s: Fragment,
    returning: &str,
    reads: Option<usize>,
) {
    sql.push_str(if sql == "WITH" { " \"" } else { ", \"" });
    sql.push_str(letter);
    push_number(sql, i);
    sql.push_str("\" AS (");
    match reads {
        Some(j) => {
            let mut table = String::from("s");
            push_number(&mut table, j);
            s.append_named(sql, values, &table);
        }
        None => s.append_to(sql, values),
    }
    sql.push_str(returning);
    sql.push(')');
}
