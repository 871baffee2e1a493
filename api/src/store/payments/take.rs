//! Taking a single-use credential (a QR nonce, a short code, an OTP session) for a payment
//! and locking its wallet, in one statement.
//!
//! These statements run on every payment and their shapes are few, so each is a
//! `Template`: its SQL is rendered once per shape and the values bound per call.
use chrono::{DateTime, Utc};
use entities::{otp_session, otp_session::OtpSessionStatus, qr_nonce, wallet};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter, QueryTrait,
    Statement,
    sea_query::{
        Alias, CommonTableExpression, Condition, Expr, ExprTrait, JoinType, Order,
        PostgresQueryBuilder, Query, SqliteQueryBuilder, UpdateStatement, Value, Values, WithQuery,
    },
};
use uuid::Uuid;

use crate::store::{
    customers::for_payment::{self, ForPayment},
    db::{
        positional::Positional,
        template::{Args, Template},
    },
};

/// The payment a nonce is taken for.
#[derive(Clone, Copy, Debug)]
pub struct NonceUse {
    pub payment_id: Uuid,
    /// Whether the payment is a sandbox one (whose limits it reads).
    pub sandbox: bool,
    /// The checkout session the payment completes: a nonce minted in a session pays only
    /// in it.
    pub session: Option<Uuid>,
    pub received_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

// The arguments of the take statements, by position.
const MERCHANT: usize = 0;
const SANDBOX: usize = 1;
const PAYMENT: usize = 2;
const NOW: usize = 3;
/// The nonce's hash or short code hash; the OTP session's id.
const WHICH: usize = 4;
const RECEIVED: usize = 5;
const SESSION: usize = 6;

static TAKE_NONCE: Template = Template::new();
static TAKE_OTP: Template = Template::new();

/// Consumes the usable QR nonce with this hash for `payment_id` (the rules of
/// `usable_nonce`) and locks its wallet for the payment (see `take_and_lock`). None when no
/// usable nonce has this hash.
pub async fn take_qr_and_lock_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    nonce_hash: &str,
    at: NonceUse,
) -> Result<Option<ForPayment>, DbErr> {
    take_nonce_and_lock(c, merchant_id, Code::Qr, nonce_hash, at).await
}

/// Consumes the newest unexpired, unconsumed nonce of the merchant carrying this short code
/// for `payment_id`, if it can still pay (the rules of `usable_nonce`), and locks its wallet
/// for the payment (see `take_and_lock`). None when there is no such nonce.
pub async fn take_short_code_and_lock_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    code_hash: &str,
    at: NonceUse,
) -> Result<Option<ForPayment>, DbErr> {
    take_nonce_and_lock(c, merchant_id, Code::Short, code_hash, at).await
}

/// Consumes the merchant's OTP session `id` for `payment_id` if it is active and locks its
/// wallet for the payment (see `take_and_lock`). Returns the session as it is now (status
/// `consumed`): the caller checks the rest of it and rolls back on a mismatch. None when the
/// session is unknown or no longer active.
pub async fn take_otp_and_lock_wallet<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    sandbox: bool,
    id: Uuid,
    payment_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Option<(ForPayment, otp_session::Model)>, DbErr> {
    let args = otp_args(merchant_id, sandbox, id, payment_id, now);
    let backend = c.get_database_backend();
    let statement = TAKE_OTP.statement(backend, 0, &args, |a| take_otp(backend, a))?;
    Ok(read::<otp_session::Entity, C>(c, statement, true)
        .await?
        .and_then(|(found, s)| Some((found, s?))))
}

fn otp_args(
    merchant_id: Uuid,
    sandbox: bool,
    id: Uuid,
    payment_id: Uuid,
    now: DateTime<Utc>,
) -> [Value; 5] {
    [
        merchant_id.into(),
        sandbox.into(),
        payment_id.into(),
        now.into(),
        id.into(),
    ]
}

fn take_otp(backend: DbBackend, a: &Args) -> (String, Values) {
    let take = otp_session::Entity::update_many()
        .col_expr(
            otp_session::Column::Status,
            OtpSessionStatus::Consumed.as_str().into(),
        )
        .col_expr(otp_session::Column::PaymentId, a.get(PAYMENT).into())
        .col_expr(otp_session::Column::ConsumedAt, a.get(NOW).into())
        .filter(otp_session::Column::Id.eq(a.get(WHICH)))
        .filter(otp_session::Column::MerchantId.eq(a.get(MERCHANT)))
        .filter(otp_session::Column::Status.eq(OtpSessionStatus::Active.as_str()))
        .into_query();
    let marked = Condition::all()
        .add(Expr::col((Alias::new(TAKEN), otp_session::Column::Id)).eq(a.get(WHICH)))
        .add(Expr::col((Alias::new(TAKEN), otp_session::Column::PaymentId)).eq(a.get(PAYMENT)));
    take_and_lock::<otp_session::Entity>(backend, a, take, marked, true)
}

/// How a nonce is named.
#[derive(Clone, Copy)]
enum Code {
    /// By the hash of its QR payload.
    Qr,
    /// By its short code: the newest live nonce carrying it.
    Short,
}

/// Consumes for `payment_id` the merchant's nonce that `code` and `hash` name, if it can
/// still pay (the rules of `usable_nonce`), and locks its wallet (see `take_and_lock`).
async fn take_nonce_and_lock<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    code: Code,
    hash: &str,
    at: NonceUse,
) -> Result<Option<ForPayment>, DbErr> {
    let backend = c.get_database_backend();
    let (args, shape) = nonce_args(merchant_id, code, hash, &at);
    let in_session = at.session.is_some();
    let statement = TAKE_NONCE.statement(backend, shape, &args, |a| {
        take_nonce(backend, code, in_session, a)
    })?;
    Ok(read::<qr_nonce::Entity, C>(c, statement, false)
        .await?
        .map(|(found, _)| found))
}

/// The arguments of a nonce's take, and its shape: how the nonce is named, and whether
/// the payment completes a checkout session.
fn nonce_args(merchant_id: Uuid, code: Code, hash: &str, at: &NonceUse) -> ([Value; 7], usize) {
    let args = [
        merchant_id.into(),
        at.sandbox.into(),
        at.payment_id.into(),
        at.now.into(),
        hash.into(),
        at.received_at.into(),
        at.session.into(),
    ];
    let shape = match code {
        Code::Qr => 0,
        Code::Short => 2,
    } + usize::from(at.session.is_some());
    (args, shape)
}

fn take_nonce(backend: DbBackend, code: Code, in_session: bool, a: &Args) -> (String, Values) {
    let (which, marked) = match code {
        Code::Qr => (
            Condition::all().add(qr_nonce::Column::NonceHash.eq(a.get(WHICH))),
            qr_nonce::Column::NonceHash,
        ),
        Code::Short => {
            let newest = Query::select()
                .column(qr_nonce::Column::Id)
                .from(qr_nonce::Entity)
                .and_where(qr_nonce::Column::MerchantId.eq(a.get(MERCHANT)))
                .and_where(qr_nonce::Column::ShortCodeHash.eq(a.get(WHICH)))
                .and_where(qr_nonce::Column::ConsumedAt.is_null())
                .and_where(qr_nonce::Column::ExpiresAt.gt(a.get(NOW)))
                .order_by(qr_nonce::Column::CreatedAt, Order::Desc)
                .limit(1)
                .to_owned();
            (
                Condition::all().add(qr_nonce::Column::Id.in_subquery(newest)),
                qr_nonce::Column::ShortCodeHash,
            )
        }
    };
    // A nonce of a checkout session is, to any other payment, as unknown as no nonce.
    let in_session = if in_session {
        Condition::any()
            .add(qr_nonce::Column::CheckoutSessionId.is_null())
            .add(qr_nonce::Column::CheckoutSessionId.eq(a.get(SESSION)))
    } else {
        Condition::all().add(qr_nonce::Column::CheckoutSessionId.is_null())
    };
    let take = qr_nonce::Entity::update_many()
        .col_expr(qr_nonce::Column::ConsumedAt, a.get(NOW).into())
        .col_expr(qr_nonce::Column::PaymentId, a.get(PAYMENT).into())
        .filter(which)
        .filter(qr_nonce::Column::MerchantId.eq(a.get(MERCHANT)))
        // Checked on the row itself even where `which` checked it: after waiting for a
        // concurrent payment of the same nonce, PostgreSQL re-checks the row but keeps a
        // sub-select's answer.
        .filter(qr_nonce::Column::ConsumedAt.is_null())
        .filter(qr_nonce::Column::ExpiresAt.gt(a.get(NOW)))
        .filter(
            Condition::any()
                .add(qr_nonce::Column::SupersededAt.is_null())
                .add(qr_nonce::Column::SupersededAt.gt(a.get(RECEIVED))),
        )
        .filter(in_session)
        .into_query();
    // With the merchant, the short code's own index (merchant, code) finds the row too.
    let marked = Condition::all()
        .add(Expr::col((Alias::new(TAKEN), qr_nonce::Column::MerchantId)).eq(a.get(MERCHANT)))
        .add(Expr::col((Alias::new(TAKEN), marked)).eq(a.get(WHICH)))
        .add(Expr::col((Alias::new(TAKEN), qr_nonce::Column::PaymentId)).eq(a.get(PAYMENT)));
    take_and_lock::<qr_nonce::Entity>(backend, a, take, marked, false)
}

/// The name the consumed credential's row goes by in `take_and_lock`'s select.
const TAKEN: &str = "taken";

/// `take` (the consumption of a single-use credential of table `E`, which has a
/// `wallet_id` column) and the lock of the consumed credential's wallet for the payment: one
/// statement on PostgreSQL, where the consumption is a CTE the wallet's select joins, and one
/// call on SQLite, the `UPDATE` and then the select joining the row it marked (`marked`
/// finds it, under the name `TAKEN`). A busy wallet's payments reach its lock a round trip
/// sooner. With `with_row`, the consumed row comes back too, as it is after `take`.
fn take_and_lock<E: EntityTrait>(
    backend: DbBackend,
    a: &Args,
    mut take: UpdateStatement,
    marked: Condition,
    with_row: bool,
) -> (String, Values) {
    let mut select = for_payment::payment_select(backend, a.get(MERCHANT), a.get(SANDBOX));
    let taken = Alias::new(TAKEN);
    let taken_wallet = Expr::col((taken.clone(), Alias::new("wallet_id")))
        .equals((wallet::Entity, wallet::Column::Id));
    if with_row {
        for_payment::select_prefixed_from::<E>(&mut select, &taken, "S_");
    }
    if backend == DbBackend::Postgres {
        take.returning_all();
        select.join(JoinType::InnerJoin, taken.clone(), taken_wallet);
        let mut cte = CommonTableExpression::new();
        cte.table_name(taken).query(take);
        // In place: `WithClause::query` would clone the statement it returns.
        WithQuery::new()
            .cte(cte)
            .query(select)
            .build(PostgresQueryBuilder)
    } else {
        select.join_as(
            JoinType::InnerJoin,
            E::default(),
            taken,
            Condition::all().add(taken_wallet).add(marked),
        );
        let (update, mut values) = take.build(SqliteQueryBuilder);
        let (query, more) = select.build(SqliteQueryBuilder);
        values.0.extend(more.0);
        (format!("{update};\n{query}"), values)
    }
}

/// Runs a `take_and_lock` statement: the wallet for the payment, and with `with_row` the
/// consumed row of `E`.
async fn read<E: EntityTrait, C: ConnectionTrait>(
    c: &C,
    statement: Statement,
    with_row: bool,
) -> Result<Option<(ForPayment, Option<E::Model>)>, DbErr>
where
    E::Model: Positional,
{
    for_payment::read_for_payment(c, statement, |row, at| {
        if with_row {
            E::Model::read_at(row, at).map(Some)
        } else {
            Ok(None)
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statement a template makes is the one the builder makes of the same values.
    fn same(
        t: &Template,
        (backend, shape): (DbBackend, usize),
        args: &[Value],
        build: impl Fn(&Args) -> (String, Values),
    ) {
        let direct = build(&Args::Values(args));
        let made = t.statement(backend, shape, args, &build).unwrap();
        assert_eq!((made.sql, made.values), (direct.0, Some(direct.1)));
    }

    #[test]
    fn every_take_statement_binds_the_values_of_its_call_on_both_backends() {
        let t = Template::new();
        let now = Utc::now();
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            for session in [None, Some(Uuid::now_v7())] {
                for code in [Code::Qr, Code::Short] {
                    // Twice: the second call finds the template rendered by the first.
                    for hash in ["a1", "b2"] {
                        let at = NonceUse {
                            payment_id: Uuid::now_v7(),
                            sandbox: hash == "b2",
                            session,
                            received_at: now - chrono::Duration::seconds(1),
                            now,
                        };
                        let (args, shape) = nonce_args(Uuid::now_v7(), code, hash, &at);
                        same(&t, (backend, shape), &args, |a| {
                            take_nonce(backend, code, session.is_some(), a)
                        });
                    }
                }
            }
            let o = Template::new();
            for _ in 0..2 {
                let args = otp_args(Uuid::now_v7(), true, Uuid::now_v7(), Uuid::now_v7(), now);
                same(&o, (backend, 0), &args, |a| take_otp(backend, a));
            }
        }
    }
}
