//! Dead letters made to order: a real (sealed) SMS job that used its last attempt, as the
//! job runtime records it, for the tests of the tools that drain them.
use api::{domain::outbox::job_requests, store};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use uuid::Uuid;

use crate::{TestApp, TestTenant};

/// Dead-letters an OTP SMS to `phone` for the tenant, with `error` as its last error;
/// returns the letter's id. Replayed, it would deliver (sandbox SMS).
pub async fn dead_sms(app: &TestApp, t: &TestTenant, phone: &str, error: &str) -> Uuid {
    let state = &app.server.state;
    let txn = state.db.begin().await.unwrap();
    let job = job_requests::send_sms(
        &txn,
        &state.sealer,
        job_requests::SmsRequest {
            integration_id: t.integration_id,
            merchant_id: Some(t.merchant_id),
            is_sandbox: true,
            phone: phone.into(),
            kind: "otp".into(),
            body: "Your code is 424242".into(),
            code: Some("424242".into()),
            verification_token: None,
        },
    )
    .await
    .unwrap();
    let row = entities::outbox::Entity::find()
        .filter(entities::outbox::Column::EventId.eq(job))
        .one(&txn)
        .await
        .unwrap()
        .unwrap();
    // The job itself is not wanted: only its payload, as the dead letter keeps it.
    txn.rollback().await.unwrap();
    let now = chrono::Utc::now();
    store::queues::dead_letters::insert_once(
        &state.db,
        store::queues::dead_letters::NewDeadLetter {
            job_id: job,
            queue: job_requests::SMS_SEND,
            job_type: job_requests::SMS_SEND,
            merchant_id: Some(t.merchant_id),
            payload: row.payload,
            attempts: 8,
            error_history: serde_json::json!([
                {"attempt": 7, "at": (now - chrono::Duration::minutes(20)).to_rfc3339(), "error": error},
                {"attempt": 8, "at": now.to_rfc3339(), "error": error},
            ]),
            last_error: error,
            first_enqueued_at: now - chrono::Duration::hours(1),
            dead_at: now,
        },
    )
    .await
    .unwrap();
    entities::dead_letter::Entity::find()
        .filter(entities::dead_letter::Column::JobId.eq(job))
        .one(&state.db)
        .await
        .unwrap()
        .expect("the dead letter")
        .id
}

/// A letter's status now.
pub async fn status_of(app: &TestApp, id: Uuid) -> String {
    store::queues::dead_letters::find(&app.server.state.db, id)
        .await
        .unwrap()
        .expect("the dead letter")
        .status
        .to_string()
}

/// `n` dead webhook-batch letters of the tenant with `error`, written in one statement
/// per hundred (for tests of bulk actions over more than one page).
pub async fn many(app: &TestApp, t: &TestTenant, n: usize, error: &str) -> Vec<Uuid> {
    use sea_orm::{ActiveValue::Set, sea_query::OnConflict};
    let now = chrono::Utc::now();
    let mut ids = vec![];
    let rows: Vec<entities::dead_letter::ActiveModel> = (0..n)
        .map(|_| {
            let id = Uuid::now_v7();
            ids.push(id);
            entities::dead_letter::ActiveModel {
                id: Set(id),
                job_id: Set(Uuid::now_v7()),
                queue: Set(job_requests::WEBHOOK_BATCH.into()),
                job_type: Set(job_requests::WEBHOOK_BATCH.into()),
                merchant_id: Set(Some(t.merchant_id)),
                payload: Set(serde_json::json!({"subscription_id": Uuid::now_v7()})),
                attempts: Set(8),
                error_history: Set(serde_json::json!([{"attempt": 8, "at": now, "error": error}])),
                last_error: Set(error.into()),
                status: Set(entities::dead_letter::DeadLetterStatus::Dead),
                first_enqueued_at: Set(now),
                dead_at: Set(now),
                replay_count: Set(0),
                replayed_at: Set(None),
                purged_at: Set(None),
                purge_reason: Set(None),
            }
        })
        .collect();
    for chunk in rows.chunks(100) {
        entities::dead_letter::Entity::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::column(entities::dead_letter::Column::JobId)
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&app.server.state.db)
            .await
            .unwrap();
    }
    ids
}

/// How many of the merchant's letters are in `status`.
pub async fn count(app: &TestApp, merchant: Uuid, status: &str) -> u64 {
    store::queues::dead_letters::count(
        &app.server.state.db,
        &store::queues::dead_letters::Filter {
            status: Some(status.into()),
            merchant_id: Some(merchant),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}
