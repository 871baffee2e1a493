//! What a payment reads of the wallet it debits, in the statement that locks it: the
//! select every credential's take-and-lock statement ends in, and the reading of its rows.
use entities::{cashback_rule, promo_grant, risk_limits, wallet, wallet_user};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, IdenStatic, Iterable, QueryFilter,
    QueryResult, QueryTrait, Statement,
    sea_query::{
        Alias, Condition, Expr, ExprTrait, Func, JoinType, LockType, Order, Query, SelectStatement,
        Value,
    },
};
use uuid::Uuid;

use super::wallets::{LIVE_GRANT_STATES, live_grants};
use crate::store::db::positional::{Positional, width};

/// A wallet a payment is about to debit, with everything the payment reads of it.
pub struct ForPayment {
    pub wallet: wallet::Model,
    pub owner: wallet_user::Model,
    /// The current version of the wallet program's cashback rule.
    pub rule: Option<cashback_rule::Model>,
    /// The live grants in spend order, as `live_grants` reads them.
    pub grants: Vec<promo_grant::Model>,
    /// Whether the merchant set velocity limits for the payment's mode (only then are they
    /// read, by a statement of their own).
    pub has_limits: bool,
}

/// What a payment reads of its wallet, for the wallets of `merchant_id` (the caller narrows
/// it to one): the wallet, its owner and its program's current cashback rule; on SQLite also
/// the live grants, one row each. On PostgreSQL the wallet row is locked.
///
/// SQLite has one writer, so the grants can come in the same statement. PostgreSQL, when
/// the lock had to wait for another payment, re-reads only the locked row; joined grants
/// would be as they were before that payment, so `read_for_payment` reads them by a
/// statement of their own once the lock is held.
pub(in crate::store) fn payment_select(
    backend: DbBackend,
    merchant_id: Value,
    sandbox: Value,
) -> SelectStatement {
    let mut s = wallet::Entity::find()
        .filter(wallet::Column::MerchantId.eq(merchant_id.clone()))
        .find_also_related(wallet_user::Entity)
        .filter(wallet_user::Column::MerchantId.eq(merchant_id))
        .into_query();
    let program = || Expr::col((wallet::Entity, wallet::Column::WalletProgramId));
    let latest = Alias::new("latest");
    // (wallet_program_id, version) is unique: at most one rule row.
    let latest_version = Query::select()
        .expr(Func::max(Expr::col((
            latest.clone(),
            cashback_rule::Column::Version,
        ))))
        .from_as(cashback_rule::Entity, latest.clone())
        .and_where(Expr::col((latest, cashback_rule::Column::WalletProgramId)).eq(program()))
        .to_owned();
    s.join(
        JoinType::LeftJoin,
        cashback_rule::Entity,
        Condition::all()
            .add(
                Expr::col((
                    cashback_rule::Entity,
                    cashback_rule::Column::WalletProgramId,
                ))
                .eq(program()),
            )
            .add(
                Expr::col((cashback_rule::Entity, cashback_rule::Column::Version))
                    .in_subquery(latest_version),
            ),
    );
    select_prefixed::<cashback_rule::Entity>(&mut s, "C_");
    // Whether the merchant has limits for this mode: one primary-key probe in the same
    // statement, and one column (decoding the limits on every payment cost 6% of a
    // payment's instructions; most merchants have none).
    s.join(
        JoinType::LeftJoin,
        risk_limits::Entity,
        Condition::all()
            .add(
                Expr::col((risk_limits::Entity, risk_limits::Column::MerchantId))
                    .equals((wallet::Entity, wallet::Column::MerchantId)),
            )
            .add(Expr::col((risk_limits::Entity, risk_limits::Column::IsSandbox)).eq(sandbox)),
    );
    s.expr_as(
        Expr::col((risk_limits::Entity, risk_limits::Column::MerchantId)).is_not_null(),
        Alias::new("R_set"),
    );
    if backend == DbBackend::Sqlite {
        s.join(
            JoinType::LeftJoin,
            promo_grant::Entity,
            Condition::all()
                .add(
                    Expr::col((promo_grant::Entity, promo_grant::Column::WalletId))
                        .eq(Expr::col((wallet::Entity, wallet::Column::Id))),
                )
                .add(
                    Expr::col((promo_grant::Entity, promo_grant::Column::State))
                        .is_in(LIVE_GRANT_STATES),
                ),
        );
        select_prefixed::<promo_grant::Entity>(&mut s, "G_");
        s.order_by(
            (promo_grant::Entity, promo_grant::Column::ExpiresAt),
            Order::Asc,
        )
        .order_by(
            (promo_grant::Entity, promo_grant::Column::CreatedAt),
            Order::Asc,
        );
    } else {
        // Only the wallet: QR mints lock identities, and payments must never.
        s.lock_with_tables(LockType::Update, [wallet::Entity]);
    }
    s
}

/// Where the parts of `payment_select`'s rows start (the columns are read by position,
/// `store::db::positional`): the wallet, its owner, the cashback rule, whether limits are
/// set, and on SQLite a live grant.
const OWNER_AT: usize = width::<wallet::Model>();
const RULE_AT: usize = OWNER_AT + width::<wallet_user::Model>();
const LIMITS_AT: usize = RULE_AT + width::<cashback_rule::Model>();
const GRANT_AT: usize = LIMITS_AT + 1;

/// How many columns `payment_select` selects on `backend`: where the columns a caller adds
/// after them start.
pub(in crate::store) fn payment_width(backend: DbBackend) -> usize {
    match backend {
        DbBackend::Sqlite => GRANT_AT + width::<promo_grant::Model>(),
        _ => GRANT_AT,
    }
}

/// Runs a statement ending in a `payment_select` (for one wallet) and reads its rows, with
/// `extra` read from the first row (columns the statement added, from the position given).
pub(in crate::store) async fn read_for_payment<C: ConnectionTrait, X>(
    c: &C,
    statement: Statement,
    extra: impl FnOnce(&QueryResult, usize) -> Result<X, DbErr>,
) -> Result<Option<(ForPayment, X)>, DbErr> {
    let backend = c.get_database_backend();
    let rows = c.query_all_raw(statement).await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    // The owner is joined on its merchant too: none is a wallet of another merchant's.
    let Some(owner) = joined::<wallet_user::Model>(first, OWNER_AT)? else {
        return Ok(None);
    };
    let extra = extra(first, payment_width(backend))?;
    let wallet = wallet::Model::read_at(first, 0)?;
    let rule = joined::<cashback_rule::Model>(first, RULE_AT)?;
    let has_limits: bool = first.try_get_by_index(LIMITS_AT)?;
    let grants = if backend == DbBackend::Sqlite {
        let mut grants = Vec::with_capacity(rows.len());
        for row in &rows {
            grants.extend(joined::<promo_grant::Model>(row, GRANT_AT)?);
        }
        grants
    } else {
        live_grants(c, wallet.id).await?
    };
    Ok(Some((
        ForPayment {
            wallet,
            owner,
            rule,
            grants,
            has_limits,
        },
        extra,
    )))
}

/// The model a left join read from column `at` on, or None when the join found no row (its
/// `id`, the first column, is NULL): most payments find no cashback rule.
fn joined<M: Positional>(row: &QueryResult, at: usize) -> Result<Option<M>, DbErr> {
    match row.try_get_by_index::<Option<Uuid>>(at)? {
        Some(_) => M::read_at(row, at).map(Some),
        None => Ok(None),
    }
}

/// Every column of `E`, named with `prefix` as sea-orm's own multi-model selects name them.
fn select_prefixed<E: EntityTrait>(s: &mut SelectStatement, prefix: &str) {
    for col in <E::Column as Iterable>::iter() {
        s.expr_as(
            col.select_as(col.into_expr()),
            Alias::new(format!("{prefix}{}", col.as_str())),
        );
    }
}

/// Every column of `E` as found under the alias `table`, named with `prefix`.
pub(in crate::store) fn select_prefixed_from<E: EntityTrait>(
    s: &mut SelectStatement,
    table: &Alias,
    prefix: &str,
) {
    for col in <E::Column as Iterable>::iter() {
        s.expr_as(
            Expr::col((table.clone(), col)),
            Alias::new(format!("{prefix}{}", col.as_str())),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::{PostgresQueryBuilder, SqliteQueryBuilder};

    /// The aliases of a select's columns, in order (the top-level list, before its `FROM`).
    fn aliases(sql: &str) -> Vec<String> {
        let list = &sql[..sql.find(r#" FROM "wallets""#).unwrap()];
        list.split(r#" AS ""#)
            .skip(1)
            .map(|a| a[..a.find('"').unwrap()].to_string())
            .collect()
    }

    fn prefixed<M: Positional>(prefix: &str) -> Vec<String> {
        M::COLUMNS.iter().map(|c| format!("{prefix}{c}")).collect()
    }

    #[test]
    fn the_reader_s_positions_are_the_select_s_columns() {
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            let s = payment_select(backend, Uuid::nil().into(), false.into());
            let sql = match backend {
                DbBackend::Postgres => s.to_string(PostgresQueryBuilder),
                _ => s.to_string(SqliteQueryBuilder),
            };
            let mut expected = prefixed::<wallet::Model>("A_");
            assert_eq!(expected.len(), OWNER_AT);
            expected.extend(prefixed::<wallet_user::Model>("B_"));
            assert_eq!(expected.len(), RULE_AT);
            expected.extend(prefixed::<cashback_rule::Model>("C_"));
            assert_eq!(expected.len(), LIMITS_AT);
            expected.push("R_set".into());
            if backend == DbBackend::Sqlite {
                expected.extend(prefixed::<promo_grant::Model>("G_"));
            }
            assert_eq!(expected.len(), payment_width(backend));
            assert_eq!(aliases(&sql), expected, "{backend:?}");
        }
    }
}
