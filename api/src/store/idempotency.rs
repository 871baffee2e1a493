use chrono::{DateTime, Utc};
use entities::idempotency_record;
use idempotency_record::Column as Col;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter,
    sea_query::{Expr, ExprTrait, OnConflict, Query, Values},
};
use uuid::Uuid;

use crate::store::db::{
    template::{Args, Shape, Template, built},
    writes::{Slot, Writes},
};

/// The live record of `(owner, key)`; an expired one counts as absent.
pub async fn find<C: ConnectionTrait>(
    c: &C,
    owner: &str,
    key: &str,
    now: DateTime<Utc>,
) -> Result<Option<idempotency_record::Model>, DbErr> {
    idempotency_record::Entity::find()
        .filter(idempotency_record::Column::Owner.eq(owner))
        .filter(idempotency_record::Column::IdempotencyKey.eq(key))
        .filter(idempotency_record::Column::ExpiresAt.gt(now))
        .one(c)
        .await
}

pub struct NewRecord<'a> {
    pub id: Uuid,
    pub owner: &'a str,
    pub key: &'a str,
    pub operation: &'a str,
    pub fingerprint: &'a str,
    pub status_code: u16,
    pub response_body: &'a str,
    pub sealed_secret: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Writes the record when `w` is flushed, replacing an expired one of the same
/// `(owner, key)` (and the sealed secret it kept). Its slot counts 0, nothing written, when
/// a live record holds the key: the unique index on `(owner, key)` decides, so a second
/// execution can never commit.
pub fn defer_insert(w: &mut Writes, r: NewRecord<'_>) -> Slot {
    let touches = format!("idempotency_records:{}:{}", r.owner, r.key);
    let args = vec![
        r.id.into(),
        r.owner.into(),
        r.key.into(),
        r.operation.into(),
        r.fingerprint.into(),
        i32::from(r.status_code).into(),
        r.response_body.into(),
        r.sealed_secret.into(),
        r.created_at.into(),
        r.expires_at.into(),
    ];
    w.upsert(UPSERT.bind(Shape::default(), args, build_upsert), touches)
}

static UPSERT: Template = Template::new();

/// The record's columns, in the order of `defer_insert`'s arguments.
const COLUMNS: [Col; 10] = [
    Col::Id,
    Col::Owner,
    Col::IdempotencyKey,
    Col::Operation,
    Col::RequestFingerprint,
    Col::StatusCode,
    Col::ResponseBody,
    Col::SealedSecret,
    Col::CreatedAt,
    Col::ExpiresAt,
];
const CREATED_AT: usize = 8;

fn build_upsert(backend: DbBackend, _: Shape, a: &Args) -> (String, Values) {
    let mut q = Query::insert();
    q.into_table(idempotency_record::Entity)
        .columns(COLUMNS)
        .values_panic(
            COLUMNS
                .iter()
                .enumerate()
                .map(|(i, c)| c.save_as(Expr::val(a.get(i)))),
        )
        .on_conflict(
            OnConflict::columns([Col::Owner, Col::IdempotencyKey])
                .update_columns(
                    COLUMNS
                        .into_iter()
                        .filter(|c| !matches!(c, Col::Owner | Col::IdempotencyKey)),
                )
                .action_and_where(
                    Expr::col((idempotency_record::Entity, Col::ExpiresAt)).lte(a.get(CREATED_AT)),
                )
                .to_owned(),
        );
    built(&q, backend)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::{QueryTrait, Set};

    /// The upsert as sea-orm builds it from the record's active model.
    fn reference(r: &NewRecord<'_>) -> sea_orm::sea_query::InsertStatement {
        idempotency_record::Entity::insert(idempotency_record::ActiveModel {
            id: Set(r.id),
            owner: Set(r.owner.to_string()),
            idempotency_key: Set(r.key.to_string()),
            operation: Set(r.operation.to_string()),
            request_fingerprint: Set(r.fingerprint.to_string()),
            status_code: Set(i32::from(r.status_code)),
            response_body: Set(r.response_body.to_owned()),
            sealed_secret: Set(r.sealed_secret.clone()),
            created_at: Set(r.created_at),
            expires_at: Set(r.expires_at),
        })
        .on_conflict(
            OnConflict::columns([Col::Owner, Col::IdempotencyKey])
                .update_columns([
                    Col::Id,
                    Col::Operation,
                    Col::RequestFingerprint,
                    Col::StatusCode,
                    Col::ResponseBody,
                    Col::SealedSecret,
                    Col::CreatedAt,
                    Col::ExpiresAt,
                ])
                .action_and_where(
                    Expr::col((idempotency_record::Entity, Col::ExpiresAt)).lte(r.created_at),
                )
                .to_owned(),
        )
        .into_query()
    }

    #[test]
    fn the_record_s_upsert_is_the_one_sea_orm_builds_of_its_active_model() {
        let now = Utc::now();
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            for secret in [None, Some("sealed".to_string()), None] {
                let r = NewRecord {
                    id: Uuid::now_v7(),
                    owner: "merchant:1",
                    key: "key-1",
                    operation: "payments.create",
                    fingerprint: "f",
                    status_code: 201,
                    response_body: "{\"id\":1}",
                    sealed_secret: secret,
                    created_at: now,
                    expires_at: now + chrono::Duration::hours(24),
                };
                let expected = built(&reference(&r), backend);
                let mut w = Writes::default();
                defer_insert(&mut w, r);
                assert_eq!(w.texts(backend), vec![(expected.0, expected.1.0)]);
            }
        }
    }
}
