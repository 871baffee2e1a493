use crate::store::Db;
use chrono::Utc;
use futures::{FutureExt, future::BoxFuture};

use super::{OutgoingSms, SANDBOX_FAILING_PREFIX, SendError, SmsProvider};
use crate::store;

/// Stores each message (once per job) for `GET /v1/sandbox/messages`.
pub struct MockProvider {
    db: Db,
}

impl MockProvider {
    pub fn new(db: Db) -> Self {
        MockProvider { db }
    }
}

impl SmsProvider for MockProvider {
    fn name(&self) -> &'static str {
        "sandbox-mock"
    }

    fn send<'a>(&'a self, sms: &'a OutgoingSms) -> BoxFuture<'a, Result<(), SendError>> {
        async move {
            if sms.phone.starts_with(SANDBOX_FAILING_PREFIX) {
                return Err(SendError::Temporary(format!(
                    "sandbox number {SANDBOX_FAILING_PREFIX}… always fails"
                )));
            }
            store::sandbox_messages::insert_once(
                &self.db,
                store::sandbox_messages::NewMessage {
                    job_id: sms.job_id,
                    integration_id: sms.integration_id,
                    merchant_id: sms.merchant_id,
                    phone: &sms.phone,
                    kind: &sms.kind,
                    code: sms.code.as_deref(),
                    verification_token: sms.verification_token.as_deref(),
                    body: &sms.body,
                    sent_at: Utc::now(),
                },
            )
            .await
            .map_err(|e| SendError::Temporary(format!("storing the sandbox message: {e}")))
        }
        .boxed()
    }
}
