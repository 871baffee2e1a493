//! Work the domain asks of the job runners: each request is an outbox job row written in
//! the caller's transaction, so the job exists if and only if the change that asked for it
//! committed. The payload shapes live here; `jobs::*` read them back and do the work.
use chrono::Utc;
use entities::webhook_delivery;
use sea_orm::{ConnectionTrait, DbErr};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::domain::outbox::events::{NewOutbox, OutboxKind};
use crate::{infra::crypto::Sealer, store};

/// The `sms_send` job.
pub const SMS_SEND: &str = "sms_send";

/// What a domain service asks to send.
#[derive(Clone, Debug)]
pub struct SmsRequest {
    pub integration_id: Uuid,
    pub merchant_id: Option<Uuid>,
    pub is_sandbox: bool,
    /// E.164.
    pub phone: String,
    /// `otp` or `enrollment`.
    pub kind: String,
    pub body: String,
    pub code: Option<String>,
    pub verification_token: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SmsPayload {
    pub integration_id: Uuid,
    pub merchant_id: Option<Uuid>,
    pub is_sandbox: bool,
    pub phone: String,
    pub kind: String,
    pub sealed_content: String,
}

#[derive(Serialize, Deserialize)]
pub struct SmsContent {
    pub body: String,
    pub code: Option<String>,
    pub verification_token: Option<String>,
}

/// What seals an SMS's content to its integration and phone.
pub fn sms_aad(integration_id: Uuid, phone: &str) -> Vec<u8> {
    format!("sms:{integration_id}:{phone}").into_bytes()
}

/// Writes the SMS as an outbox job in the caller's transaction: it is sent only if that
/// transaction commits. Returns the job id.
pub async fn send_sms<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    r: SmsRequest,
) -> Result<Uuid, DbErr> {
    let content = SmsContent {
        body: r.body,
        code: r.code,
        verification_token: r.verification_token,
    };
    let sealed_content = sealer.seal(
        &serde_json::to_vec(&content).expect("content serialises"),
        &sms_aad(r.integration_id, &r.phone),
    );
    let payload = SmsPayload {
        integration_id: r.integration_id,
        merchant_id: r.merchant_id,
        is_sandbox: r.is_sandbox,
        phone: r.phone.clone(),
        kind: r.kind,
        sealed_content,
    };
    store::outbox::append(
        c,
        NewOutbox {
            kind: OutboxKind::Job,
            topic: SMS_SEND.into(),
            merchant_id: r.merchant_id,
            resource_type: "phone".into(),
            resource_id: r.phone,
            payload: serde_json::to_value(payload).expect("payload serialises"),
            occurred_at: Utc::now(),
        },
    )
    .await
}

/// The `webhook_deliver` job.
pub const WEBHOOK_DELIVER: &str = "webhook_deliver";

/// The `webhook_batch` job: a subscription's first attempts, asked for by the relay.
pub const WEBHOOK_BATCH: &str = "webhook_batch";

/// The `report_run` job: runs one report (docs/accounting.md) and stores its file.
pub const REPORT_RUN: &str = "report_run";

/// Every job type; each has its own queue of the same name.
pub const QUEUES: &[&str] = &[SMS_SEND, WEBHOOK_DELIVER, WEBHOOK_BATCH, REPORT_RUN];

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReportPayload {
    pub report_id: Uuid,
}

/// Asks for the report run in the caller's transaction: it runs only if that transaction
/// commits.
pub async fn run_report<C: ConnectionTrait>(
    c: &C,
    merchant_id: Uuid,
    report_id: Uuid,
) -> Result<(), DbErr> {
    store::outbox::append(
        c,
        NewOutbox {
            kind: OutboxKind::Job,
            topic: REPORT_RUN.into(),
            merchant_id: Some(merchant_id),
            resource_type: "report_run".into(),
            resource_id: report_id.to_string(),
            payload: serde_json::to_value(ReportPayload { report_id }).expect("payload serialises"),
            occurred_at: Utc::now(),
        },
    )
    .await
    .map(|_| ())
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveryPayload {
    pub delivery_id: Uuid,
    /// The delivery's `replays` when the job was made.
    #[serde(default)]
    pub series: i32,
}

/// Asks for a send of `d` (its current series) through the outbox, in the caller's
/// transaction: the job exists if and only if the change that asked for it committed.
pub async fn deliver_webhook<C: ConnectionTrait>(
    c: &C,
    d: &webhook_delivery::Model,
) -> Result<(), DbErr> {
    store::outbox::append(
        c,
        NewOutbox {
            kind: OutboxKind::Job,
            topic: WEBHOOK_DELIVER.into(),
            merchant_id: Some(d.merchant_id),
            resource_type: "webhook_delivery".into(),
            resource_id: d.id.to_string(),
            payload: json!(DeliveryPayload {
                delivery_id: d.id,
                series: d.replays
            }),
            occurred_at: Utc::now(),
        },
    )
    .await
    .map(|_| ())
}
