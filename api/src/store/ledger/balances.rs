//! Balances of customer value as the entries alone give them: per merchant, currency and
//! account kind at an instant, and how many wallets hold any. Reports read these; nothing
//! here writes.
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, FromQueryResult, Statement, Value};
use uuid::Uuid;

/// Values bound to a statement, each named by its placeholder as it is added (`$n` on
/// PostgreSQL, `?` on SQLite).
struct Binds {
    backend: DbBackend,
    values: Vec<Value>,
}

impl Binds {
    fn new(backend: DbBackend) -> Self {
        Binds {
            backend,
            values: Vec::new(),
        }
    }

    fn push(&mut self, v: Value) -> String {
        self.values.push(v);
        if self.backend == DbBackend::Postgres {
            format!("${}", self.values.len())
        } else {
            "?".to_string()
        }
    }
}

/// Which entries to sum: the merchants (never empty: a caller with none asks for nothing),
/// the account kinds, an optional currency, from which instant (the beginning when `None`;
/// a snapshot's end otherwise) and up to which.
pub struct Scope<'a> {
    pub merchants: &'a [Uuid],
    pub kinds: &'a [&'a str],
    pub currency: Option<&'a str>,
    pub since: Option<Since>,
    pub until: Until,
}

/// The start of a sum that does not start at the beginning: the entries made at an instant
/// and after (`At`), or only those after it (`After`: the balance at the instant already
/// took the entries made at it).
#[derive(Clone, Copy, Debug)]
pub enum Since {
    At(DateTime<Utc>),
    After(DateTime<Utc>),
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
    let mut binds = Binds::new(backend);
    let mut p = |v: Value| binds.push(v);
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
    match s.since {
        Some(Since::At(t)) => sql.push_str(&format!(" AND created_at >= {}", p(t.into()))),
        Some(Since::After(t)) => sql.push_str(&format!(" AND created_at > {}", p(t.into()))),
        None => {}
    }
    if let Some(c) = s.currency {
        sql.push_str(&format!(" AND currency = {}", p(c.into())));
    }
    (sql, binds.values)
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

/// How the number of wallets holding a balance other than zero (over the scope's account
/// kinds taken together) changed from just before `since` to the scope's end, per merchant
/// and currency: each wallet with an entry in the window counts +1 if it held nothing
/// before and holds something after, -1 the other way round. Only those wallets are read,
/// each from the index of its entries alone (`ix_ledger_entries_wallet_values`): a wallet's
/// merchant and currency are its entries' in the window, as a wallet has one of each.
pub async fn holders_delta<C: ConnectionTrait>(
    c: &C,
    s: &Scope<'_>,
) -> Result<Vec<Holders>, DbErr> {
    let Some(since) = s.since else {
        return holders(c, s).await;
    };
    if s.merchants.is_empty() || s.kinds.is_empty() {
        return Ok(Vec::new());
    }
    let backend = c.get_database_backend();
    let (touched, values) = filter(backend, s);
    // Numbering continues after the window's own values (`$n` counts on).
    let mut binds = Binds { backend, values };
    let mut p = |v: Value| binds.push(v);
    let (before_op, at) = match since {
        Since::At(t) => ("<", t),
        Since::After(t) => ("<=", t),
    };
    let before = p(at.into());
    let kinds: Vec<String> = s.kinds.iter().map(|k| p((*k).into())).collect();
    let (op, at) = match s.until {
        Until::Through(t) => ("<=", t),
        Until::Before(t) => ("<", t),
    };
    let until = p(at.into());
    Holders::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            // Placeholders in the order they were bound (SQLite's `?` are positional).
            "WITH touched AS ( \
               SELECT DISTINCT merchant_id, currency, wallet_id FROM ledger_entries WHERE {touched}) \
             SELECT merchant_id, currency, CAST(SUM(CASE \
               WHEN before_minor = 0 AND after_minor <> 0 THEN 1 \
               WHEN before_minor <> 0 AND after_minor = 0 THEN -1 ELSE 0 END) AS BIGINT) AS wallets \
             FROM ( \
               SELECT t.merchant_id AS merchant_id, t.currency AS currency, t.wallet_id AS wallet_id, \
                 SUM(CASE WHEN e.created_at {before_op} {before} THEN e.amount_minor ELSE 0 END) AS before_minor, \
                 SUM(e.amount_minor) AS after_minor \
               FROM touched t JOIN ledger_entries e ON e.wallet_id = t.wallet_id \
               WHERE e.account_kind IN ({}) AND e.created_at {op} {until} \
               GROUP BY t.merchant_id, t.currency, t.wallet_id \
             ) w GROUP BY merchant_id, currency",
            kinds.join(", ")
        ),
        binds.values,
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
    let mut binds = Binds::new(backend);
    let (merchant, from, to) = (
        binds.push(merchant.into()),
        binds.push(from.into()),
        binds.push(to.into()),
    );
    let kinds: Vec<String> = kinds.iter().map(|k| binds.push((*k).into())).collect();
    Movement::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT e.currency AS currency, e.account_kind AS account_kind, p.kind AS posting_kind, \
               CAST(SUM(e.amount_minor) AS BIGINT) AS amount_minor \
             FROM ledger_entries e JOIN ledger_postings p ON p.id = e.posting_id \
             WHERE e.merchant_id = {merchant} AND e.created_at >= {from} AND e.created_at < {to} \
               AND e.account_kind IN ({}) \
             GROUP BY e.currency, e.account_kind, p.kind",
            kinds.join(", ")
        ),
        binds.values,
    ))
    .all(c)
    .await
}

/// One wallet's actual money and activity up to an instant.
#[derive(Clone, Debug, FromQueryResult)]
pub struct WalletActivity {
    pub wallet_id: Uuid,
    pub currency: String,
    pub actual_minor: i64,
    /// Its latest posting of a customer-initiated kind, if it had one.
    pub last_customer_at: Option<DateTime<Utc>>,
    /// Its first entry; none if it had none yet.
    pub first_at: Option<DateTime<Utc>>,
}

/// The merchant's wallets after `after` (by id), `limit` of them, each with its actual
/// money before `before` and when it last moved by a posting of `customer_kinds`: a page
/// of a walk over every wallet that never holds more than a page. The wallets come in id
/// order from `ix_wallets_merchant_id`; each one's money and first entry are read from the
/// wallet index alone, and only its latest entries (newest first, until one is of a
/// customer's posting) from the table and their postings, where reading every entry's
/// posting went to the heap once per entry of the history.
pub async fn wallet_activity_page<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    before: DateTime<Utc>,
    customer_kinds: &[&str],
    after: Option<Uuid>,
    limit: u64,
) -> Result<Vec<WalletActivity>, DbErr> {
    let backend = c.get_database_backend();
    let mut binds = Binds::new(backend);
    let mut p = |v: Value| binds.push(v);
    // Placeholders in the order they appear (SQLite's `?` are positional).
    let before_actual = p(before.into());
    let before_customer = p(before.into());
    let kinds: Vec<String> = customer_kinds.iter().map(|k| p((*k).into())).collect();
    let before_first = p(before.into());
    let merchant = p(merchant.into());
    let after = match after {
        Some(a) => format!("AND w.id > {}", p(a.into())),
        None => String::new(),
    };
    let limit = p((limit as i64).into());
    WalletActivity::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT w.id AS wallet_id, w.currency AS currency, \
               CAST(COALESCE((SELECT SUM(e.amount_minor) FROM ledger_entries e \
                 WHERE e.wallet_id = w.id AND e.created_at < {before_actual} \
                   AND e.account_kind = 'wallet_actual'), 0) AS BIGINT) AS actual_minor, \
               (SELECT e.created_at FROM ledger_entries e JOIN ledger_postings p ON p.id = e.posting_id \
                 WHERE e.wallet_id = w.id AND e.created_at < {before_customer} AND p.kind IN ({}) \
                 ORDER BY e.created_at DESC LIMIT 1) AS last_customer_at, \
               (SELECT MIN(e.created_at) FROM ledger_entries e \
                 WHERE e.wallet_id = w.id AND e.created_at < {before_first}) AS first_at \
             FROM wallets w WHERE w.merchant_id = {merchant} {after} \
             ORDER BY w.id LIMIT {limit}",
            kinds.join(", ")
        ),
        binds.values,
    ))
    .all(c)
    .await
}

/// One entry of a wallet's actual money.
#[derive(Clone, Debug, FromQueryResult)]
pub struct ActualEntry {
    pub wallet_id: Uuid,
    pub amount_minor: i64,
    pub created_at: DateTime<Utc>,
}

/// The actual-money entries of `wallets` before `before`, by wallet then time.
pub async fn actual_entries<C: ConnectionTrait>(
    c: &C,
    wallets: &[Uuid],
    before: DateTime<Utc>,
) -> Result<Vec<ActualEntry>, DbErr> {
    if wallets.is_empty() {
        return Ok(Vec::new());
    }
    let backend = c.get_database_backend();
    let mut binds = Binds::new(backend);
    let mut p = |v: Value| binds.push(v);
    let ids: Vec<String> = wallets.iter().map(|w| p((*w).into())).collect();
    let before = p(before.into());
    ActualEntry::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT wallet_id, amount_minor, created_at FROM ledger_entries \
             WHERE account_kind = 'wallet_actual' AND wallet_id IN ({}) AND created_at < {before} \
             ORDER BY wallet_id, created_at",
            ids.join(", ")
        ),
        binds.values,
    ))
    .all(c)
    .await
}
