//! Job `sms_send`: delivers one SMS through the provider that matches the credential that
//! asked for it. The message content travels sealed, so codes never sit in plaintext in the
//! outbox or the queue tables.
use chrono::Utc;
use sea_orm::{ConnectionTrait, DbErr};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{JobEnvelope, JobError, runtime::JobDeps};
use crate::{
    crypto::Sealer,
    domain::events::{NewOutbox, OutboxKind},
    sms::{OutgoingSms, SendError},
    store,
};

pub const JOB_TYPE: &str = "sms_send";

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
struct Payload {
    integration_id: Uuid,
    merchant_id: Option<Uuid>,
    is_sandbox: bool,
    phone: String,
    kind: String,
    sealed_content: String,
}

#[derive(Serialize, Deserialize)]
struct Content {
    body: String,
    code: Option<String>,
    verification_token: Option<String>,
}

fn aad(integration_id: Uuid, phone: &str) -> Vec<u8> {
    format!("sms:{integration_id}:{phone}").into_bytes()
}

/// Writes the SMS as an outbox job in the caller's transaction: it is sent only if that
/// transaction commits. Returns the job id.
pub async fn enqueue<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    r: SmsRequest,
) -> Result<Uuid, DbErr> {
    let content = Content {
        body: r.body,
        code: r.code,
        verification_token: r.verification_token,
    };
    let sealed_content = sealer.seal(
        &serde_json::to_vec(&content).expect("content serialises"),
        &aad(r.integration_id, &r.phone),
    );
    let payload = Payload {
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
            topic: JOB_TYPE.into(),
            merchant_id: r.merchant_id,
            resource_type: "phone".into(),
            resource_id: r.phone,
            payload: serde_json::to_value(payload).expect("payload serialises"),
            occurred_at: Utc::now(),
        },
    )
    .await
}

pub async fn run(deps: &JobDeps, env: &JobEnvelope) -> Result<(), JobError> {
    let p: Payload = serde_json::from_value(env.payload.clone())
        .map_err(|e| JobError::Permanent(format!("undecodable sms_send payload: {e}")))?;
    let content = deps
        .state
        .sealer
        .open(&p.sealed_content, &aad(p.integration_id, &p.phone))
        .map_err(|_| JobError::Permanent("the message content could not be unsealed".into()))?;
    let content: Content = serde_json::from_slice(&content)
        .map_err(|e| JobError::Permanent(format!("undecodable message content: {e}")))?;
    let provider = if p.is_sandbox {
        &deps.sms_mock
    } else {
        &deps.sms_live
    };
    let sms = OutgoingSms {
        job_id: env.job_id,
        integration_id: p.integration_id,
        merchant_id: p.merchant_id,
        phone: p.phone,
        kind: p.kind,
        body: content.body,
        code: content.code,
        verification_token: content.verification_token,
    };
    provider.send(&sms).await.map_err(|e| match e {
        SendError::Temporary(m) => JobError::Retryable(format!("{}: {m}", provider.name())),
        SendError::Permanent(m) => JobError::Permanent(format!("{}: {m}", provider.name())),
    })?;
    tracing::info!(provider = provider.name(), kind = %sms.kind, "sms sent");
    Ok(())
}
