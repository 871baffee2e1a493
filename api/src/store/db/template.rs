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
use std::sync::OnceLock;

use sea_orm::{
    DbBackend, DbErr, Statement,
    sea_query::{Value, Values},
};

/// Shapes a template can have, per backend.
pub const SHAPES: usize = 8;

/// The arguments of one call: the values themselves, or the markers a template is
/// rendered with.
pub enum Args<'a> {
    Values(&'a [Value]),
    Markers,
}

const MARKER: &str = "\u{0}template-argument:";

impl Args<'_> {
    /// The `i`th argument.
    pub fn get(&self, i: usize) -> Value {
        match self {
            Args::Values(v) => v[i].clone(),
            Args::Markers => Value::String(Some(format!("{MARKER}{i}"))),
        }
    }
}

pub struct Template {
    rendered: [OnceLock<Rendered>; 2 * SHAPES],
}

struct Rendered {
    sql: String,
    values: Vec<Part>,
}

enum Part {
    Argument(usize),
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
        let slot = match backend {
            DbBackend::Postgres => shape,
            _ => SHAPES + shape,
        };
        let Some(place) = self.rendered.get(slot).filter(|_| shape < SHAPES) else {
            return Err(DbErr::Custom(format!("no template shape {shape}")));
        };
        let rendered = match place.get() {
            Some(r) => r,
            None => {
                // Two first calls may both render; one keeps its text, the same text.
                let r = render(build(&Args::Markers), args.len())?;
                place.get_or_init(|| r)
            }
        };
        let values = rendered
            .values
            .iter()
            .map(|p| match p {
                Part::Argument(i) => args[*i].clone(),
                Part::Fixed(v) => v.clone(),
            })
            .collect();
        Ok(Statement::from_sql_and_values(
            backend,
            rendered.sql.clone(),
            Values(values),
        ))
    }
}

fn render((sql, values): (String, Values), arguments: usize) -> Result<Rendered, DbErr> {
    let values = values
        .0
        .into_iter()
        .map(|v| match &v {
            Value::String(Some(s)) if s.starts_with(MARKER) => s[MARKER.len()..]
                .parse::<usize>()
                .ok()
                .filter(|i| *i < arguments)
                .map(Part::Argument)
                .ok_or_else(|| DbErr::Custom(format!("a template names argument {s:?}"))),
            _ => Ok(Part::Fixed(v)),
        })
        .collect::<Result<_, _>>()?;
    Ok(Rendered { sql, values })
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
}
