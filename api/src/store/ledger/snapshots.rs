//! The hourly snapshots of customer value (`domain::ledger::snapshots`): their rows, the
//! mark that says up to which instant (an hour's start) a merchant's rows are complete, and
//! the merchants' clocks the builder seals hours by.
use chrono::{DateTime, NaiveDate, Utc};
use entities::{
    enterprise, integration_enterprise, ledger_entry, ledger_hour_closing, ledger_hour_movement,
    ledger_snapshot_mark,
};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
    sea_query::Expr,
};
use uuid::Uuid;

/// Every merchant with its clock's offset ahead of real time (0 unless a sandbox
/// integration's test clock runs ahead: `domain::sandbox::test_clock::merchant_clock`).
pub async fn merchant_clocks<C: ConnectionTrait>(c: &C) -> Result<Vec<(Uuid, i64)>, DbErr> {
    let ahead = crate::store::tenancy::advanced_clocks(c).await?;
    let mut offsets = std::collections::HashMap::<Uuid, i64>::new();
    if !ahead.is_empty() {
        let ids: Vec<Uuid> = ahead.iter().map(|(i, _)| *i).collect();
        for link in integration_enterprise::Entity::find()
            .filter(integration_enterprise::Column::IntegrationId.is_in(ids))
            .all(c)
            .await?
        {
            let o = ahead
                .iter()
                .find(|(i, _)| *i == link.integration_id)
                .map_or(0, |(_, o)| *o);
            let e = offsets.entry(link.enterprise_id).or_insert(0);
            *e = (*e).max(o);
        }
    }
    Ok(enterprise::Entity::find()
        .select_only()
        .column(enterprise::Column::Id)
        .order_by_asc(enterprise::Column::Id)
        .into_tuple::<Uuid>()
        .all(c)
        .await?
        .into_iter()
        .map(|m| (m, offsets.get(&m).copied().unwrap_or(0)))
        .collect())
}

/// The merchant's mark: `None` if it has none, `Some(None)` if it has one with no hour built.
pub async fn mark<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
) -> Result<Option<Option<DateTime<Utc>>>, DbErr> {
    Ok(ledger_snapshot_mark::Entity::find_by_id(merchant)
        .one(c)
        .await?
        .map(|m| m.built_until))
}

/// The marks of `merchants` that have an hour built: up to where each one's rows are complete.
pub async fn built_until<C: ConnectionTrait>(
    c: &C,
    merchants: &[Uuid],
) -> Result<Vec<(Uuid, DateTime<Utc>)>, DbErr> {
    if merchants.is_empty() {
        return Ok(Vec::new());
    }
    Ok(ledger_snapshot_mark::Entity::find()
        .filter(ledger_snapshot_mark::Column::MerchantId.is_in(merchants.to_vec()))
        .all(c)
        .await?
        .into_iter()
        .filter_map(|m| Some((m.merchant_id, m.built_until?)))
        .collect())
}

/// Gives the merchant a mark with no hour built, unless it has one.
pub async fn ensure_mark<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    ledger_snapshot_mark::Entity::insert(ledger_snapshot_mark::ActiveModel {
        merchant_id: Set(merchant),
        built_until: Set(None),
        updated_at: Set(now),
    })
    .on_conflict_do_nothing_on([ledger_snapshot_mark::Column::MerchantId])
    .exec(c)
    .await
    .map(|_| ())
}

/// Moves the merchant's mark from `from` to `to` if it is still at `from`; false if another
/// builder moved it first. Taken first in a build's transaction, so two builders of the
/// same hours queue on the mark's row and the second writes nothing.
pub async fn advance_mark<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    from: Option<DateTime<Utc>>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let at = ledger_snapshot_mark::Column::BuiltUntil;
    let r = ledger_snapshot_mark::Entity::update_many()
        .col_expr(at, Expr::value(to))
        .col_expr(ledger_snapshot_mark::Column::UpdatedAt, Expr::value(now))
        .filter(ledger_snapshot_mark::Column::MerchantId.eq(merchant))
        .filter(match from {
            Some(d) => at.eq(d),
            None => at.is_null(),
        })
        .exec(c)
        .await?;
    Ok(r.rows_affected == 1)
}

/// When the merchant's first entry (at or after `since`, when given) was made.
pub async fn next_entry_at<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    since: Option<DateTime<Utc>>,
) -> Result<Option<DateTime<Utc>>, DbErr> {
    let mut q = ledger_entry::Entity::find()
        .select_only()
        .column(ledger_entry::Column::CreatedAt)
        .filter(ledger_entry::Column::MerchantId.eq(merchant));
    if let Some(since) = since {
        q = q.filter(ledger_entry::Column::CreatedAt.gte(since));
    }
    q.order_by_asc(ledger_entry::Column::CreatedAt)
        .limit(1)
        .into_tuple::<DateTime<Utc>>()
        .one(c)
        .await
}

/// Writes built rows.
pub async fn insert_rows<C: ConnectionTrait>(
    c: &C,
    movements: Vec<ledger_hour_movement::Model>,
    closings: Vec<ledger_hour_closing::Model>,
) -> Result<(), DbErr> {
    if !movements.is_empty() {
        ledger_hour_movement::Entity::insert_many(
            movements
                .into_iter()
                .map(ledger_hour_movement::ActiveModel::from),
        )
        .exec(c)
        .await?;
    }
    if !closings.is_empty() {
        ledger_hour_closing::Entity::insert_many(
            closings
                .into_iter()
                .map(ledger_hour_closing::ActiveModel::from),
        )
        .exec(c)
        .await?;
    }
    Ok(())
}

/// Each of `merchants`' currencies' latest hourly closing before `before` (the closing of
/// an hour that ended by then), in `currency` only when given.
pub async fn closings_before<C: ConnectionTrait>(
    c: &C,
    merchants: &[Uuid],
    currency: Option<&str>,
    before: DateTime<Utc>,
) -> Result<Vec<ledger_hour_closing::Model>, DbErr> {
    if merchants.is_empty() {
        return Ok(Vec::new());
    }
    let mut q = ledger_hour_closing::Entity::find()
        .filter(ledger_hour_closing::Column::MerchantId.is_in(merchants.to_vec()))
        .filter(ledger_hour_closing::Column::Hour.lt(before));
    if let Some(cur) = currency {
        q = q.filter(ledger_hour_closing::Column::Currency.eq(cur));
    }
    // The latest hour of each merchant and currency, then that hour's row: the groups are
    // few (a merchant's currencies) and both reads follow the primary key.
    let latest = q
        .select_only()
        .column(ledger_hour_closing::Column::MerchantId)
        .column(ledger_hour_closing::Column::Currency)
        .column_as(ledger_hour_closing::Column::Hour.max(), "hour")
        .group_by(ledger_hour_closing::Column::MerchantId)
        .group_by(ledger_hour_closing::Column::Currency)
        .into_tuple::<(Uuid, String, DateTime<Utc>)>()
        .all(c)
        .await?;
    let mut out = Vec::with_capacity(latest.len());
    for key in latest {
        if let Some(row) = ledger_hour_closing::Entity::find_by_id(key).one(c).await? {
            out.push(row);
        }
    }
    Ok(out)
}

/// Before any day the ledger can hold, and after (bounds the databases' types all take).
pub const FIRST_DAY: NaiveDate = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a valid date");
pub const LAST_DAY: NaiveDate = NaiveDate::from_ymd_opt(9999, 12, 31).expect("a valid date");

/// The merchant's movement rows of the hours in `[from, to)`, by hour.
pub async fn movements_between<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<ledger_hour_movement::Model>, DbErr> {
    ledger_hour_movement::Entity::find()
        .filter(ledger_hour_movement::Column::MerchantId.eq(merchant))
        .filter(ledger_hour_movement::Column::Hour.gte(from))
        .filter(ledger_hour_movement::Column::Hour.lt(to))
        .order_by_asc(ledger_hour_movement::Column::Hour)
        .all(c)
        .await
}

/// The merchant's closing rows of the hours in `[from, to)`, by hour.
pub async fn closings_between<C: ConnectionTrait>(
    c: &C,
    merchant: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<ledger_hour_closing::Model>, DbErr> {
    ledger_hour_closing::Entity::find()
        .filter(ledger_hour_closing::Column::MerchantId.eq(merchant))
        .filter(ledger_hour_closing::Column::Hour.gte(from))
        .filter(ledger_hour_closing::Column::Hour.lt(to))
        .order_by_asc(ledger_hour_closing::Column::Hour)
        .all(c)
        .await
}

/// Drops the merchant's snapshots (every merchant's when `None`): rows and marks. The
/// builder starts again from the first entry.
pub async fn reset<C: ConnectionTrait>(c: &C, merchant: Option<Uuid>) -> Result<u64, DbErr> {
    let mut marks = ledger_snapshot_mark::Entity::delete_many();
    let mut movements = ledger_hour_movement::Entity::delete_many();
    let mut closings = ledger_hour_closing::Entity::delete_many();
    if let Some(m) = merchant {
        marks = marks.filter(ledger_snapshot_mark::Column::MerchantId.eq(m));
        movements = movements.filter(ledger_hour_movement::Column::MerchantId.eq(m));
        closings = closings.filter(ledger_hour_closing::Column::MerchantId.eq(m));
    }
    let n = marks.exec(c).await?.rows_affected;
    movements.exec(c).await?;
    closings.exec(c).await?;
    Ok(n)
}
