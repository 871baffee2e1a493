//! Balances of customer value as the entries alone give them: per merchant, currency and
//! account kind at an instant, and how many wallets hold any. Reports read these; nothing
//! here writes.
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, FromQueryResult, Statement, Value};
use uuid::Uuid;

/// Which entries to sum: the merchants (never empty: a caller with none asks for nothing),
/// the account kinds, an optional currency, and up to which instant.
pub struct Scope<'a> {
    pub merchants: &'a [Uuid],
    pub kinds: &'a [&'a str],
    pub currency: Option<&'a str>,
    pub until: Until,
}

/// The end of a sum: the balance at an instant takes the entries made at it
/// (`Through`); the balance at the start of a day does not (`Before`).
#[derive(Clone, Copy, Debug)]
pub enum Until {
    Through(DateTime<Utc>),
    Before(DateTime<Utc>),
}

#[derive(Clone, Debug, FromQueryResult)]
pub struct KindBalance {
    pub merchant_id: Uuid,
    pub currency: String,
    pub account_kind: String,
    pub amount_minor: i64,
}

#[derive(Clone, Debug, FromQueryResult)]
pub struct Holders {
    pub merchant_id: Uuid,
    pub currency: String,
    pub wallets: i64,
}

/// `WHERE` over the scope, with its values in order.
fn filter(backend: DbBackend, s: &Scope<'_>) -> (String, Vec<Value>) {
    let mut values: Vec<Value> = Vec::new();
    let mut p = |v: Value| {
        values.push(v);
        if backend == DbBackend::Postgres {
            format!("${}", values.len())
        } else {
            "?".to_string()
        }
    };
    let merchants: Vec<String> = s.merchants.iter().map(|m| p((*m).into())).collect();
    let kinds: Vec<String> = s.kinds.iter().map(|k| p((*k).into())).collect();
    let (op, at) = match s.until {
        Until::Through(t) => ("<=", t),
        Until::Before(t) => ("<", t),
    };
    let mut sql = format!(
        "merchant_id IN ({}) AND account_kind IN ({}) AND created_at {op} {}",
        merchants.join(", "),
        kinds.join(", "),
        p(at.into()),
    );
    if let Some(c) = s.currency {
        sql.push_str(&format!(" AND currency = {}", p(c.into())));
    }
    (sql, values)
}

/// The sum of each account kind's entries at the scope's instant, per merchant and currency.
pub async fn by_kind<C: ConnectionTrait>(c: &C, s: &Scope<'_>) -> Result<Vec<KindBalance>, DbErr> {
    if s.merchants.is_empty() || s.kinds.is_empty() {
        return Ok(Vec::new());
    }
    let backend = c.get_database_backend();
    let (filter, values) = filter(backend, s);
    KindBalance::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT merchant_id, currency, account_kind, \
               CAST(SUM(amount_minor) AS BIGINT) AS amount_minor \
             FROM ledger_entries WHERE {filter} \
             GROUP BY merchant_id, currency, account_kind"
        ),
        values,
    ))
    .all(c)
    .await
}

/// How many wallets hold a balance other than zero over the scope's account kinds taken
/// together, per merchant and currency.
pub async fn holders<C: ConnectionTrait>(c: &C, s: &Scope<'_>) -> Result<Vec<Holders>, DbErr> {
    if s.merchants.is_empty() || s.kinds.is_empty() {
        return Ok(Vec::new());
    }
    let backend = c.get_database_backend();
    let (filter, values) = filter(backend, s);
    Holders::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT merchant_id, currency, CAST(COUNT(*) AS BIGINT) AS wallets FROM ( \
               SELECT merchant_id, currency, wallet_id FROM ledger_entries WHERE {filter} \
               GROUP BY merchant_id, currency, wallet_id HAVING SUM(amount_minor) <> 0 \
             ) held GROUP BY merchant_id, currency"
        ),
        values,
    ))
    .all(c)
    .await
}

/// One day's (or any window's) movement of one account kind by one kind of posting.
#[derive(Clone, Debug, FromQueryResult)]
pub struct Movement {
    pub currency: String,
    pub account_kind: String,
    pub posting_kind: String,
    pub amount_minor: i64,
}

/// What moved the merchant's accounts of `kinds` in `[from, to)`, by currency, account kind
/// and posting kind.
pub async fn movements<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    kinds: &[&str],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Movement>, DbErr> {
    let backend = c.get_database_backend();
    let mut values: Vec<Value> = vec![merchant.into(), from.into(), to.into()];
    values.extend(kinds.iter().map(|k| Value::from(*k)));
    let p = |i: usize| {
        if backend == DbBackend::Postgres {
            format!("${i}")
        } else {
            "?".to_string()
        }
    };
    let kinds_sql: Vec<String> = (4..4 + kinds.len()).map(p).collect();
    Movement::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT e.currency AS currency, e.account_kind AS account_kind, p.kind AS posting_kind, \
               CAST(SUM(e.amount_minor) AS BIGINT) AS amount_minor \
             FROM ledger_entries e JOIN ledger_postings p ON p.id = e.posting_id \
             WHERE e.merchant_id = {} AND e.created_at >= {} AND e.created_at < {} \
               AND e.account_kind IN ({}) \
             GROUP BY e.currency, e.account_kind, p.kind",
            p(1),
            p(2),
            p(3),
            kinds_sql.join(", ")
        ),
        values,
    ))
    .all(c)
    .await
}
