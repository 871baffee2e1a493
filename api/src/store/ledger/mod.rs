//! Ledger persistence: postings and their append-only entries, the balance columns they
//! keep current, and the check that recomputes those columns from the entries.
use chrono::Utc;
use entities::{ledger_entry, ledger_posting, promo_grant, wallet};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, FromQueryResult, QueryFilter,
    QueryTrait, Set, Statement, Value,
    sea_query::{Expr, ExprTrait, Values},
};
use uuid::Uuid;

use crate::store::db::{
    template::{Args, Bound, Shape, Template, built},
    writes::Writes,
};

pub mod balances;
pub mod policies;
pub mod reports;
pub mod snapshots;

/// An account as the ledger stores it (`domain::ledger::Account` converts into it): its
/// kind and id, and the balance column its entries move, if it keeps one.
#[derive(Clone, Copy, Debug)]
pub struct AccountRef {
    pub kind: &'static str,
    pub id: Uuid,
    pub balance: Option<BalanceColumn>,
}

/// The balance columns kept beside the entries (wallet-side accounts only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BalanceColumn {
    /// `wallets.actual_minor`.
    WalletActual,
    /// `promo_grants.remaining_minor`.
    GrantRemaining,
    /// `wallets.pending_topups_minor`.
    WalletPending,
}

/// A posting as rows (`domain::ledger::Posting` converts into it).
pub struct PostingRows<'a> {
    pub kind: &'static str,
    pub merchant_id: Uuid,
    pub wallet_id: Uuid,
    pub currency: &'a str,
    pub entries: Vec<(AccountRef, i64)>,
}

/// What a posting is about (a payment, a refund ...), and when it happened by the tenant's
/// clock: the time reports place it at.
pub struct Reference<'a> {
    pub kind: &'a str,
    pub id: Uuid,
    pub memo: Option<String>,
    pub at: chrono::DateTime<Utc>,
}

/// Writes `posting` and moves the balance columns of its wallet-side accounts by the same
/// amounts, in the caller's transaction. Refuses an unbalanced posting, and any posting that
/// would take a wallet or grant below zero (the guard is in the UPDATE itself, so it holds
/// even if a caller forgot to lock the wallet).
pub async fn post<'p, C: ConnectionTrait>(
    c: &C,
    posting: impl Into<PostingRows<'p>>,
    reference: Reference<'_>,
) -> Result<Uuid, DbErr> {
    let mut w = Writes::default();
    let id = defer_post(&mut w, posting, reference)?;
    w.flush(c).await?;
    Ok(id)
}

/// Like `post`, written (and its guards checked) when `w` is flushed.
pub fn defer_post<'p>(
    w: &mut Writes,
    posting: impl Into<PostingRows<'p>>,
    reference: Reference<'_>,
) -> Result<Uuid, DbErr> {
    let posting = posting.into();
    if posting
        .entries
        .iter()
        .map(|(_, amount)| amount)
        .sum::<i64>()
        != 0
    {
        return Err(DbErr::Custom(format!(
            "refusing an unbalanced {} posting",
            posting.kind
        )));
    }
    let now = reference.at;
    let id = Uuid::now_v7();
    w.insert_rows(
        &POSTING,
        vec![ledger_posting::ActiveModel {
            id: Set(id),
            merchant_id: Set(posting.merchant_id),
            kind: Set(posting.kind.to_string()),
            reference_type: Set(reference.kind.to_string()),
            reference_id: Set(reference.id),
            memo: Set(reference.memo),
            created_at: Set(now),
        }],
    );
    let rows = posting
        .entries
        .iter()
        .map(|(account, amount)| ledger_entry::ActiveModel {
            posting_id: Set(id),
            merchant_id: Set(posting.merchant_id),
            account_kind: Set(account.kind.to_string()),
            account_id: Set(account.id),
            wallet_id: Set(Some(posting.wallet_id)),
            currency: Set(posting.currency.to_string()),
            amount_minor: Set(*amount),
            created_at: Set(now),
            ..Default::default()
        })
        .collect();
    w.insert_rows(&ENTRIES, rows);
    // One move per balance column, by the posting's net on it: a release moves a grant's
    // credit between two of its accounts and leaves its remaining credit (and state) alone.
    let mut moves: Vec<(BalanceColumn, Uuid, i64, &'static str)> = Vec::new();
    for (account, amount) in &posting.entries {
        let Some(column) = account.balance else {
            continue;
        };
        match moves
            .iter_mut()
            .find(|(c, id, _, _)| *c == column && *id == account.id)
        {
            Some(m) => m.2 += amount,
            None => moves.push((column, account.id, *amount, account.kind)),
        }
    }
    for (column, id, amount, kind) in moves {
        if amount == 0 {
            continue;
        }
        let below_zero = format!("{kind} {id} would go below zero");
        match column {
            BalanceColumn::WalletActual => w.update_one(
                move_wallet(wallet::Column::ActualMinor, id, amount, now),
                format!("wallets:{id}"),
                below_zero,
            ),
            BalanceColumn::WalletPending => w.update_one(
                move_wallet(wallet::Column::PendingTopupsMinor, id, amount, now),
                format!("wallets:{id}"),
                below_zero,
            ),
            BalanceColumn::GrantRemaining => w.update_one(
                move_grant(id, amount, now),
                format!("promo_grants:{id}"),
                below_zero,
            ),
        };
    }
    Ok(id)
}

// Every posting's statements, rendered once per shape (`store::db::template`).
static POSTING: Template = Template::new();
static ENTRIES: Template = Template::new();
static MOVE_WALLET: Template = Template::new();
static MOVE_GRANT: Template = Template::new();

// The arguments of a balance move, by position.
const DELTA: usize = 0;
const NOW: usize = 1;
const ID: usize = 2;

fn move_args(id: Uuid, delta: i64, now: chrono::DateTime<Utc>) -> Vec<Value> {
    vec![delta.into(), now.into(), id.into()]
}

/// Moves a wallet's balance column (a shape each) by `delta`, unless it would go below zero.
fn move_wallet(column: wallet::Column, id: Uuid, delta: i64, now: chrono::DateTime<Utc>) -> Bound {
    let index = usize::from(!matches!(column, wallet::Column::ActualMinor));
    let shape = Shape { index, key: 0 };
    MOVE_WALLET.bind(shape, move_args(id, delta, now), build_move_wallet)
}

fn build_move_wallet(backend: DbBackend, shape: Shape, a: &Args) -> (String, Values) {
    let column = match shape.index {
        0 => wallet::Column::ActualMinor,
        _ => wallet::Column::PendingTopupsMinor,
    };
    let q = wallet::Entity::update_many()
        .col_expr(column, Expr::col(column).add(a.get(DELTA)))
        .col_expr(wallet::Column::UpdatedAt, Expr::val(a.get(NOW)))
        .filter(wallet::Column::Id.eq(a.get(ID)))
        .filter(Expr::col(column).add(a.get(DELTA)).gte(0))
        .into_query();
    built(&q, backend)
}

/// A grant that reaches zero is CONSUMED; a refund into a CONSUMED grant releases it again.
fn move_grant(id: Uuid, delta: i64, now: chrono::DateTime<Utc>) -> Bound {
    let shape = Shape { index: 0, key: 0 };
    MOVE_GRANT.bind(shape, move_args(id, delta, now), build_move_grant)
}

fn build_move_grant(backend: DbBackend, _: Shape, a: &Args) -> (String, Values) {
    let remaining = Expr::col(promo_grant::Column::RemainingMinor).add(a.get(DELTA));
    let (consumed, released) = (
        promo_grant::PromoGrantState::Consumed.as_str(),
        promo_grant::PromoGrantState::Released.as_str(),
    );
    let state = Expr::case(remaining.clone().eq(0), consumed)
        .case(Expr::col(promo_grant::Column::State).eq(consumed), released)
        .finally(Expr::col(promo_grant::Column::State));
    let q = promo_grant::Entity::update_many()
        .col_expr(promo_grant::Column::State, state.into())
        .col_expr(promo_grant::Column::RemainingMinor, remaining.clone())
        .col_expr(promo_grant::Column::UpdatedAt, Expr::val(a.get(NOW)))
        .filter(promo_grant::Column::Id.eq(a.get(ID)))
        .filter(remaining.gte(0))
        .into_query();
    built(&q, backend)
}

/// What the consistency check found. Empty lists mean the ledger and the balances agree.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Report {
    pub postings: i64,
    pub entries: i64,
    /// Postings whose entries do not sum to zero in some currency.
    pub unbalanced_postings: Vec<Uuid>,
    /// Wallets whose `actual_minor` differs from their entries (or is negative).
    pub wallet_mismatches: Vec<Mismatch>,
    /// Grants whose `remaining_minor` differs from their entries (or is negative).
    pub grant_mismatches: Vec<Mismatch>,
    /// Wallets whose `pending_topups_minor` differs from their entries (or is negative).
    #[serde(default)]
    pub pending_mismatches: Vec<Mismatch>,
    /// Stored daily snapshot days that differ from the ledger's (`domain::ledger::snapshots`),
    /// each described.
    #[serde(default)]
    pub snapshot_mismatches: Vec<String>,
}

impl Report {
    pub fn is_consistent(&self) -> bool {
        self.unbalanced_postings.is_empty()
            && self.wallet_mismatches.is_empty()
            && self.grant_mismatches.is_empty()
            && self.pending_mismatches.is_empty()
            && self.snapshot_mismatches.is_empty()
    }
}

#[derive(Clone, Debug, serde::Serialize, FromQueryResult)]
pub struct Mismatch {
    pub id: Uuid,
    pub stored_minor: i64,
    pub ledger_minor: i64,
}

#[derive(FromQueryResult)]
struct IdRow {
    id: Uuid,
}

#[derive(FromQueryResult)]
struct CountRow {
    n: i64,
}

/// Recomputes every balance column from the entries, for one merchant or all of them.
pub async fn check<C: ConnectionTrait>(c: &C, merchant: Option<Uuid>) -> Result<Report, DbErr> {
    let backend = c.get_database_backend();
    let (filter, values): (&str, Vec<Value>) = match merchant {
        Some(m) => (
            if backend == DbBackend::Postgres {
                "merchant_id = $1"
            } else {
                "merchant_id = ?"
            },
            vec![m.into()],
        ),
        None => ("1 = 1", vec![]),
    };
    let q = |sql: String| Statement::from_sql_and_values(backend, sql, values.clone());
    let postings = CountRow::find_by_statement(q(format!(
        "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM ledger_postings WHERE {filter}"
    )))
    .one(c)
    .await?
    .map_or(0, |r| r.n);
    let entries = CountRow::find_by_statement(q(format!(
        "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM ledger_entries WHERE {filter}"
    )))
    .one(c)
    .await?
    .map_or(0, |r| r.n);
    let unbalanced = IdRow::find_by_statement(q(format!(
        "SELECT posting_id AS id FROM ledger_entries WHERE {filter} \
         GROUP BY posting_id, currency HAVING SUM(amount_minor) <> 0"
    )))
    .all(c)
    .await?;
    let mismatches = |table: &str, column: &str, kinds: &str| {
        format!(
            "SELECT t.id AS id, t.{column} AS stored_minor, \
             CAST(COALESCE((SELECT SUM(e.amount_minor) FROM ledger_entries e \
               WHERE e.account_kind IN ({kinds}) AND e.account_id = t.id), 0) AS BIGINT) AS ledger_minor \
             FROM {table} t WHERE {}",
            filter.replace("merchant_id", "t.merchant_id")
        )
    };
    let wrong = |rows: Vec<Mismatch>| {
        rows.into_iter()
            .filter(|m| m.stored_minor != m.ledger_minor || m.stored_minor < 0)
            .collect::<Vec<_>>()
    };
    let wallets =
        Mismatch::find_by_statement(q(mismatches("wallets", "actual_minor", "'wallet_actual'")))
            .all(c)
            .await?;
    let grants = Mismatch::find_by_statement(q(mismatches(
        "promo_grants",
        "remaining_minor",
        "'promo_grant', 'promo_grant_locked'",
    )))
    .all(c)
    .await?;
    let pending = Mismatch::find_by_statement(q(mismatches(
        "wallets",
        "pending_topups_minor",
        "'wallet_pending_topup'",
    )))
    .all(c)
    .await?;
    Ok(Report {
        postings,
        entries,
        unbalanced_postings: unbalanced.into_iter().map(|r| r.id).collect(),
        wallet_mismatches: wrong(wallets),
        grant_mismatches: wrong(grants),
        pending_mismatches: wrong(pending),
        snapshot_mismatches: Vec::new(),
    })
}

/// The balance of one account, summed from its entries (for merchant-side accounts, which
/// keep no balance column).
pub async fn account_balance<C: ConnectionTrait>(
    c: &C,
    account: impl Into<AccountRef>,
) -> Result<i64, DbErr> {
    let account = account.into();
    let backend = c.get_database_backend();
    let (a, b) = if backend == DbBackend::Postgres {
        ("$1", "$2")
    } else {
        ("?", "?")
    };
    let row = CountRow::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT CAST(COALESCE(SUM(amount_minor), 0) AS BIGINT) AS n FROM ledger_entries \
             WHERE account_kind = {a} AND account_id = {b}"
        ),
        vec![account.kind.into(), account.id.into()],
    ))
    .one(c)
    .await?;
    Ok(row.map_or(0, |r| r.n))
}

/// One posting as it moved one wallet's money (its actual money and its grants).
#[derive(Clone, Debug, FromQueryResult)]
pub struct WalletActivity {
    pub posting_id: Uuid,
    /// payment, refund, void, adjustment, grant_accrual, escrow_hold ...
    pub kind: String,
    pub reference_type: String,
    pub reference_id: Uuid,
    pub actual_delta_minor: i64,
    pub promo_delta_minor: i64,
    pub created_at: chrono::DateTime<Utc>,
}

/// The wallet's latest postings, newest first, with what each did to its two money classes.
pub async fn wallet_activity<C: ConnectionTrait>(
    c: &C,
    wallet_id: Uuid,
    limit: u64,
) -> Result<Vec<WalletActivity>, DbErr> {
    let backend = c.get_database_backend();
    let p = if backend == DbBackend::Postgres {
        ["$1", "$2", "$3"]
    } else {
        ["?", "?", "?"]
    };
    WalletActivity::find_by_statement(Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT p.id AS posting_id, p.kind AS kind, p.reference_type AS reference_type, \
               p.reference_id AS reference_id, p.created_at AS created_at, \
               CAST(SUM(CASE WHEN e.account_kind = 'wallet_actual' THEN e.amount_minor ELSE 0 END) AS BIGINT) AS actual_delta_minor, \
               CAST(SUM(CASE WHEN e.account_kind IN ('promo_grant', 'promo_grant_locked') THEN e.amount_minor ELSE 0 END) AS BIGINT) AS promo_delta_minor \
             FROM ledger_entries e JOIN ledger_postings p ON p.id = e.posting_id \
             WHERE (e.account_kind = 'wallet_actual' AND e.account_id = {}) \
                OR (e.account_kind IN ('promo_grant', 'promo_grant_locked') AND e.account_id IN (SELECT g.id FROM promo_grants g WHERE g.wallet_id = {})) \
             GROUP BY p.id, p.kind, p.reference_type, p.reference_id, p.created_at \
             ORDER BY p.created_at DESC, p.id DESC LIMIT {}",
            p[0], p[1], p[2]
        ),
        vec![wallet_id.into(), wallet_id.into(), (limit as i64).into()],
    ))
    .all(c)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_balance_move_binds_the_values_of_its_call_on_both_backends() {
        let now = Utc::now();
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            // Twice each: the second call finds the text the first rendered.
            for delta in [-250, 100] {
                for column in [
                    wallet::Column::ActualMinor,
                    wallet::Column::PendingTopupsMinor,
                ] {
                    let [made, direct] =
                        move_wallet(column, Uuid::now_v7(), delta, now).both(backend);
                    assert_eq!(made, direct, "{column:?} on {backend:?}");
                }
                let [made, direct] = move_grant(Uuid::now_v7(), delta, now).both(backend);
                assert_eq!(made, direct, "grant on {backend:?}");
            }
        }
    }
}
