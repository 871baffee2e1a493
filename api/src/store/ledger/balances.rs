//! Balances of customer value as the entries alone give them: per merchant, currency and
//! account kind at an instant, and how many wallets hold any. Reports read these; nothing
//! here writes.
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, FromQueryResult, Statement, Value};
use uuid::Uuid;

/// Which entries to sum: the merchants (never empty: a caller with none asks for nothing),
/// the account kinds, an optional currency, and the instant (entries at or before it).
pub struct Scope<'a> {
    pub merchants: &'a [Uuid],
    pub kinds: &'a [&'a str],
    pub currency: Option<&'a str>,
    pub at: DateTime<Utc>,
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
    let mut sql = format!(
        "merchant_id IN ({}) AND account_kind IN ({}) AND created_at <= {}",
        merchants.join(", "),
        kinds.join(", "),
        p(s.at.into()),
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
