//! Job `sms_send`: delivers one SMS through the provider that matches the credential that
//! asked for it. The message content travels sealed, so codes never sit in plaintext in the
//! outbox or the queue tables.
use super::{JobError, QueuedJob, context::JobDeps};
use crate::{
    domain::outbox::job_requests::{SmsContent, SmsPayload, sms_aad},
    jobs::sms::{OutgoingSms, SendError},
};

pub use crate::domain::outbox::job_requests::SMS_SEND as JOB_TYPE;

pub async fn run(deps: &JobDeps, env: &QueuedJob) -> Result<(), JobError> {
    let p: SmsPayload = serde_json::from_value(env.payload.clone())
        .map_err(|e| JobError::Permanent(format!("undecodable sms_send payload: {e}")))?;
    let content = deps
        .state
        .sealer
        .open(&p.sealed_content, &sms_aad(p.integration_id, &p.phone))
        .map_err(|_| JobError::Permanent("the message content could not be unsealed".into()))?;
    let content: SmsContent = serde_json::from_slice(&content)
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
