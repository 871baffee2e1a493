use chrono::{DateTime, Utc};
use entities::sandbox_message;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
    sea_query::OnConflict,
};
use uuid::Uuid;

pub struct NewMessage<'a> {
    pub job_id: Uuid,
    pub integration_id: Uuid,
    pub merchant_id: Option<Uuid>,
    pub phone: &'a str,
    pub kind: &'a str,
    pub code: Option<&'a str>,
    pub verification_token: Option<&'a str>,
    pub body: &'a str,
    pub sent_at: DateTime<Utc>,
}

/// Stores a mock-delivered message once per job, however often the job runs.
pub async fn insert_once<C: ConnectionTrait>(c: &C, m: NewMessage<'_>) -> Result<(), DbErr> {
    let res = sandbox_message::Entity::insert(sandbox_message::ActiveModel {
        id: Set(Uuid::now_v7()),
        job_id: Set(m.job_id),
        integration_id: Set(m.integration_id),
        merchant_id: Set(m.merchant_id),
        phone: Set(m.phone.to_string()),
        kind: Set(m.kind.to_string()),
        code: Set(m.code.map(str::to_string)),
        verification_token: Set(m.verification_token.map(str::to_string)),
        body: Set(m.body.to_string()),
        sent_at: Set(m.sent_at),
    })
    .on_conflict(
        OnConflict::column(sandbox_message::Column::JobId)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(c)
    .await;
    match res {
        Ok(_) | Err(DbErr::RecordNotInserted) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The integration's messages to one phone, newest first.
pub async fn list_for_phone<C: ConnectionTrait>(
    c: &C,
    integration_id: Uuid,
    phone: &str,
    before: Option<Uuid>,
    limit: u64,
) -> Result<Vec<sandbox_message::Model>, DbErr> {
    // Newest first: ids are UUIDv7 taken when the message was sent.
    let mut q = sandbox_message::Entity::find()
        .filter(sandbox_message::Column::IntegrationId.eq(integration_id))
        .filter(sandbox_message::Column::Phone.eq(phone));
    if let Some(b) = before {
        q = q.filter(sandbox_message::Column::Id.lt(b));
    }
    q.order_by_desc(sandbox_message::Column::Id)
        .limit(limit)
        .all(c)
        .await
}
