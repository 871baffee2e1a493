//! Statements of a fixed shape, rendered to SQL once per process and bound per call.
//!
//! Building a statement with sea-query and rendering it (every expression walked, every
//! identifier quoted, the tree dropped) cost a payment more instructions than the database
//! driver did: the statement that takes a QR nonce and locks its wallet was 13% of a QR
//! payment, and the SQL text it makes is the same every time. A template is built by the
//! same sea-query code, once for each shape, with a marker where each argument goes; every
//! later call reuses the text and puts the arguments where the markers were.
//!
//! A shape is what decides the text besides the backend: an argument that is present or
//! not, a choice of column. The builder must take every argument through `Args::get` and
//! decide nothing on their values, only on the shape it is given; `tests` in the modules
//! that use templates compare a template's statement with the one built directly.
//!
//! A write held back for a batch (`store::db::writes`) does not know its backend yet: it
//! carries its template, shape and arguments (`Bound`), and the batch renders it as it runs,
//! a `Fragment` whose placeholders it numbers after those of the writes before it.
use std::sync::OnceLock;

use sea_orm::{
    DbBackend, DbErr, Statement,
    sea_query::{PostgresQueryBuilder, QueryStatementWriter, SqliteQueryBuilder, Value, Values},
};

/// Shapes a template can have, per backend.
pub const SHAPES: usize = 8;

/// The arguments of one call: the values themselves, or the markers a template is
/// rendered with.
pub enum Args<'a> {
    Values(&'a [Value]),
    /// Markers for this many arguments.
    Markers(usize),
}

const MARKER: &str = "\u{0}template-argument:";

impl Args<'_> {
    /// The `i`th argument.
    pub fn get(&self, i: usize) -> Value {
        match self {
            Args::Values(v) => v[i].clone(),
            Args::Markers(_) => Value::String(Some(format!("{MARKER}{i}"))),
        }
    }

    /// How many arguments there are.
    pub fn count(&self) -> usize {
        match self {
            Args::Values(v) => v.len(),
            Args::Markers(n) => *n,
        }
    }
}

pub struct Template {
    rendered: [OnceLock<Rendered>; 2 * SHAPES],
}

/// What decides a template's text besides the backend: `index` (below `SHAPES`) picks the
/// slot, and `key`, when a call site's shapes are too many to number (the columns an
/// insert sets), must be the one the slot was rendered with, or the call is built directly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub index: usize,
    pub key: u64,
}

/// Builds a template's statement in a shape on a backend. A plain function, so that a write
/// can carry it until its batch knows the backend.
pub type Build = fn(DbBackend, Shape, &Args) -> (String, Values);

/// A template's statement and its arguments, rendered when its batch runs (see
/// `store::db::writes`).
pub struct Bound {
    template: &'static Template,
    shape: Shape,
    args: Vec<Value>,
    build: Build,
}

/// A statement's SQL and values, ready to be put into a batch with others.
pub struct Fragment {
    text: Text,
    values: Vec<Value>,
}

enum Text {
    Shared(&'static Rendered),
    Own(Rendered),
}

struct Rendered {
    sql: String,
    values: Vec<Part>,
    key: u64,
    /// Where the PostgreSQL placeholders (`$n`) are in `sql`.
    holes: Vec<Hole>,
}

/// A placeholder: `len` bytes at `at` naming value `n` (from 1), or (`n` 0) the quoted
/// identifier `NAME`.
struct Hole {
    at: usize,
    len: usize,
    n: usize,
}

/// A table a statement reads that its batch names when it puts the statement in (the CTE
/// of the rows an earlier write returned): a template is rendered once, the batch's names
/// differ.
pub const NAME: &str = "\u{1}template-name";

enum Part {
    /// Argument `i`; `last` where no later part names it, so its value moves there.
    Argument { i: usize, last: bool },
    /// A value the builder put in itself (a status the statement filters on).
    Fixed(Value),
}

impl Default for Template {
    fn default() -> Self {
        Self::new()
    }
}

impl Template {
    pub const fn new() -> Self {
        Template {
            rendered: [const { OnceLock::new() }; 2 * SHAPES],
        }
    }

    /// The statement `build` makes of `args` in shape `shape` (below `SHAPES`) on `backend`
    /// (PostgreSQL or SQLite): its SQL text and values, as `build` renders them.
    pub fn statement(
        &self,
        backend: DbBackend,
        shape: usize,
        args: &[Value],
        build: impl FnOnce(&Args) -> (String, Values),
    ) -> Result<Statement, DbErr> {
        let Some(place) = self.place(backend, shape) else {
            return Err(DbErr::Custom(format!("no template shape {shape}")));
        };
        let rendered = rendered_in(place, || {
            render(backend, build(&Args::Markers(args.len())), args.len(), 0)
        })?;
        Ok(Statement::from_sql_and_values(
            backend,
            rendered.sql.clone(),
            Values(rendered.bind(args.to_vec())),
        ))
    }

    fn place(&self, backend: DbBackend, shape: usize) -> Option<&OnceLock<Rendered>> {
        let slot = match backend {
            DbBackend::Postgres => shape,
            _ => SHAPES + shape,
        };
        self.rendered.get(slot).filter(|_| shape < SHAPES)
    }

    /// The statement `build` makes of `args` in `shape`, to be rendered with its batch.
    pub fn bind(&'static self, shape: Shape, args: Vec<Value>, build: Build) -> Bound {
        Bound {
            template: self,
            shape,
            args,
            build,
        }
    }
}

/// The text in `place`, rendered by `render` on the first call.
fn rendered_in(
    place: &OnceLock<Rendered>,
    render: impl FnOnce() -> Result<Rendered, DbErr>,
) -> Result<&Rendered, DbErr> {
    match place.get() {
        Some(r) => Ok(r),
        None => {
            // Two first calls may both render; one keeps its text, the same text.
            let r = render()?;
            Ok(place.get_or_init(|| r))
        }
    }
}

impl Bound {
    /// Its SQL and values on `backend`: the template's text when the template has (or can
    /// take) this shape, else built directly, the same statement at the cost of building it.
    pub fn fragment(self, backend: DbBackend) -> Result<Fragment, DbErr> {
        let Bound {
            template,
            shape,
            args,
            build,
        } = self;
        let rendered = match template.place(backend, shape.index) {
            Some(place) => Some(rendered_in(place, || {
                let markers = build(backend, shape, &Args::Markers(args.len()));
                render(backend, markers, args.len(), shape.key)
            })?),
            None => None,
        };
        Ok(match rendered.filter(|r| r.key == shape.key) {
            Some(r) => Fragment {
                values: r.bind(args),
                text: Text::Shared(r),
            },
            None => Fragment::of(backend, build(backend, shape, &Args::Values(&args))),
        })
    }
}

impl Fragment {
    /// A statement rendered by sea-query on `backend`.
    pub fn of(backend: DbBackend, (sql, values): (String, Values)) -> Fragment {
        Fragment {
            text: Text::Own(Rendered {
                holes: holes(backend, &sql),
                sql,
                values: Vec::new(),
                key: 0,
            }),
            values: values.0,
        }
    }

    /// Appends its SQL to `sql` and its values to `values`, its placeholders renumbered to
    /// follow the values already there (PostgreSQL numbers them; SQLite's `?` go in order).
    pub fn append_to(self, sql: &mut String, values: &mut Vec<Value>) {
        self.append_named(sql, values, NAME);
    }

    /// `append_to`, the table `NAME` called `name` (on PostgreSQL).
    pub fn append_named(self, sql: &mut String, values: &mut Vec<Value>, name: &str) {
        let rendered = match &self.text {
            Text::Shared(r) => r,
            Text::Own(r) => r,
        };
        let offset = values.len();
        let mut from = 0;
        for hole in &rendered.holes {
            sql.push_str(&rendered.sql[from..hole.at]);
            match hole.n {
                0 => {
                    sql.push('"');
                    sql.push_str(name);
                    sql.push('"');
                }
                n => {
                    sql.push('$');
                    push_number(sql, offset + n);
                }
            }
            from = hole.at + hole.len;
        }
        sql.push_str(&rendered.sql[from..]);
        values.extend(self.values);
    }
}

#[cfg(test)]
impl Bound {
    /// Its statement through its template, then as its builder makes it of the same values:
    /// a test asserts they are the same.
    pub fn both(self, backend: DbBackend) -> [(String, Vec<Value>); 2] {
        let direct = (self.build)(backend, self.shape, &Args::Values(&self.args));
        [
            self.fragment(backend).unwrap().text(),
            (direct.0, direct.1.0),
        ]
    }
}

#[cfg(test)]
impl Fragment {
    /// Its SQL and values, numbered from 1.
    pub fn text(self) -> (String, Vec<Value>) {
        let (mut sql, mut values) = (String::new(), Vec::new());
        self.append_to(&mut sql, &mut values);
        (sql, values)
    }
}

/// `s` rendered for `backend` (PostgreSQL or SQLite).
pub fn built(s: &impl QueryStatementWriter, backend: DbBackend) -> (String, Values) {
    match backend {
        DbBackend::Postgres => s.build(PostgresQueryBuilder),
        _ => s.build(SqliteQueryBuilder),
    }
}

impl Rendered {
    /// The statement's values: each argument moved into its last place, cloned into others.
    fn bind(&self, mut args: Vec<Value>) -> Vec<Value> {
        self.values
            .iter()
            .map(|p| match p {
                Part::Argument { i, last: true } => std::mem::replace(&mut args[*i], NULL),
                Part::Argument { i, last: false } => args[*i].clone(),
                Part::Fixed(v) => v.clone(),
            })
            .collect()
    }
}

/// What an argument moved out of its list leaves there.
const NULL: Value = Value::Bool(None);

/// Appends `n` in decimal: a batch writes its placeholders' numbers and its names a hundred
/// times per payment, and `write!` costs ten times as much.
pub fn push_number(sql: &mut String, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    sql.extend(digits[at..].iter().map(|d| char::from(*d)));
}

/// The `$n` placeholders of PostgreSQL SQL, outside quoted text and identifiers.
fn holes(backend: DbBackend, sql: &str) -> Vec<Hole> {
    let mut holes = Vec::new();
    if backend != DbBackend::Postgres {
        return holes;
    }
    let bytes = sql.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    let name = format!("\"{NAME}\"");
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            // A doubled quote inside quoted text closes and reopens it: the same state.
            Some(q) if b == q => quote = None,
            // By bytes: `i` may stand inside a character of some non-ASCII text.
            None if bytes[i..].starts_with(name.as_bytes()) => {
                holes.push(Hole {
                    at: i,
                    len: name.len(),
                    n: 0,
                });
                i += name.len() - 1;
            }
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'$' => {
                let digits = bytes[i + 1..]
                    .iter()
                    .take_while(|d| d.is_ascii_digit())
                    .count();
                if digits > 0 {
                    let n = sql[i + 1..i + 1 + digits].parse().unwrap_or(0);
                    holes.push(Hole {
                        at: i,
                        len: 1 + digits,
                        n,
                    });
                    i += digits;
                }
            }
            None => {}
        }
        i += 1;
    }
    holes
}

fn render(
    backend: DbBackend,
    (sql, values): (String, Values),
    arguments: usize,
    key: u64,
) -> Result<Rendered, DbErr> {
    let mut values = values
        .0
        .into_iter()
        .map(|v| match &v {
            Value::String(Some(s)) if s.starts_with(MARKER) => s[MARKER.len()..]
                .parse::<usize>()
                .ok()
                .filter(|i| *i < arguments)
                .map(|i| Part::Argument { i, last: false })
                .ok_or_else(|| DbErr::Custom(format!("a template names argument {s:?}"))),
            _ => Ok(Part::Fixed(v)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut placed = vec![false; arguments];
    for part in values.iter_mut().rev() {
        if let Part::Argument { i, last } = part {
            *last = !std::mem::replace(&mut placed[*i], true);
        }
    }
    Ok(Rendered {
        holes: holes(backend, &sql),
        sql,
        values,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::{Alias, Expr, ExprTrait, PostgresQueryBuilder, Query};

    fn build(a: &Args, with_name: bool) -> (String, Values) {
        let mut q = Query::select();
        q.column(Alias::new("id"))
            .from(Alias::new("t"))
            .and_where(Expr::col(Alias::new("id")).eq(a.get(0)))
            .and_where(Expr::col(Alias::new("state")).is_in(["live", "held"]));
        if with_name {
            q.and_where(Expr::col(Alias::new("name")).eq(a.get(1)));
        }
        q.build(PostgresQueryBuilder)
    }

    #[test]
    fn a_template_binds_each_call_s_arguments_where_the_builder_put_them() {
        let t = Template::new();
        for (id, name) in [(1i64, "a"), (2, "b")] {
            let args = [Value::from(id), Value::from(name)];
            for with_name in [false, true] {
                let shape = usize::from(with_name);
                let s = t
                    .statement(DbBackend::Postgres, shape, &args, |a| build(a, with_name))
                    .unwrap();
                let (sql, values) = build(&Args::Values(&args), with_name);
                assert_eq!(s.sql, sql);
                assert_eq!(s.values, Some(values));
            }
        }
    }

    #[test]
    fn a_shape_out_of_range_or_an_unknown_argument_is_an_error_not_a_panic() {
        let t = Template::new();
        let args = [Value::from(1i64)];
        assert!(
            t.statement(DbBackend::Postgres, SHAPES, &args, |a| build(a, false))
                .is_err()
        );
        assert!(
            t.statement(DbBackend::Postgres, 1, &args, |a| build(a, true))
                .is_err(),
            "argument 1 of a call with one"
        );
    }

    #[test]
    fn a_fragment_numbers_its_placeholders_after_the_values_before_it_and_not_in_quotes() {
        let sql = r#"SELECT '$1', "a$2", 'it''s $3', $1 FROM t WHERE x = $2 AND y = $10"#;
        let values: Vec<Value> = (1..=10).map(|i| Value::from(i as i64)).collect();
        let f = Fragment::of(DbBackend::Postgres, (sql.into(), Values(values.clone())));
        let (mut out, mut all) = (String::new(), vec![Value::from(0i64); 3]);
        f.append_to(&mut out, &mut all);
        assert_eq!(
            out,
            r#"SELECT '$1', "a$2", 'it''s $3', $4 FROM t WHERE x = $5 AND y = $13"#
        );
        assert_eq!(all[3..], values[..]);
        let accented = Fragment::of(DbBackend::Postgres, ("SELECT é, $1".into(), Values(vec![])));
        assert_eq!(accented.text().0, "SELECT é, $1");
        let sqlite = Fragment::of(DbBackend::Sqlite, ("SELECT ?, '$1'".into(), Values(vec![])));
        assert_eq!(sqlite.text().0, "SELECT ?, '$1'");
    }

    fn build_bound(_: DbBackend, shape: Shape, a: &Args) -> (String, Values) {
        build(a, shape.key == 1)
    }

    #[test]
    fn a_bound_statement_whose_key_is_not_its_slot_s_is_built_directly() {
        static T: Template = Template::new();
        let args = || vec![Value::from(7i64), Value::from("x")];
        let shape = |key| Shape { index: 0, key };
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            for key in [0, 0, 1, 0, 1] {
                let [made, direct] = T.bind(shape(key), args(), build_bound).both(backend);
                assert_eq!(made, direct, "key {key} on {backend:?}");
            }
            // Beyond the slots there are: built directly too.
            let far = Shape {
                index: SHAPES,
                key: 0,
            };
            let [made, direct] = T.bind(far, args(), build_bound).both(backend);
            assert_eq!(made, direct);
        }
    }

    #[test]
    fn a_number_is_written_as_display_writes_it() {
        for n in [0, 7, 10, 99, 12345, usize::MAX] {
            let mut s = String::from("$");
            push_number(&mut s, n);
            assert_eq!(s, format!("${n}"));
        }
    }
}
