use chrono::{DateTime, Utc};
use entities::idempotency_record;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryTrait, Set,
    sea_query::{Expr, ExprTrait, OnConflict},
};
use uuid::Uuid;

use crate::store::db::writes::{Slot, Writes};

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
    pub response_body: &'a [u8],
    pub sealed_secret: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Writes the record when `w` is flushed, replacing an expired one of the same
/// `(owner, key)` (and the sealed secret it kept). Its slot counts 0, nothing written, when
/// a live record holds the key: the unique index on `(owner, key)` decides, so a second
/// execution can never commit.
pub fn defer_insert(w: &mut Writes, r: NewRecord<'_>) -> Slot {
    use idempotency_record::Column as Col;
    let touches = format!("idempotency_records:{}:{}", r.owner, r.key);
    let insert = idempotency_record::Entity::insert(idempotency_record::ActiveModel {
        id: Set(r.id),
        owner: Set(r.owner.to_string()),
        idempotency_key: Set(r.key.to_string()),
        operation: Set(r.operation.to_string()),
        request_fingerprint: Set(r.fingerprint.to_string()),
        status_code: Set(i32::from(r.status_code)),
        response_body: Set(String::from_utf8_lossy(r.response_body).into_owned()),
        sealed_secret: Set(r.sealed_secret),
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
    .into_query();
    w.upsert(insert, touches)
}
