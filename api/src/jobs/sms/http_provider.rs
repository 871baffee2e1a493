use std::time::Duration;

use futures::{FutureExt, future::BoxFuture};
use serde_json::json;

use super::{OutgoingSms, SendError, SmsProvider};
use crate::infra::secret::Secret;

/// A generic JSON-over-HTTPS SMS gateway: `POST {url}` with
/// `{"to", "body", "reference"}` and `Authorization: Bearer <token>`. `reference` is the
/// job id, so a gateway that deduplicates on it sends a redelivered job once.
pub struct HttpProvider {
    client: reqwest::Client,
    url: String,
    token: Option<Secret>,
}

impl HttpProvider {
    pub fn new(url: String, token: Option<Secret>, timeout: Duration) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()?;
        Ok(HttpProvider { client, url, token })
    }
}

impl SmsProvider for HttpProvider {
    fn name(&self) -> &'static str {
        "http"
    }

    fn send<'a>(&'a self, sms: &'a OutgoingSms) -> BoxFuture<'a, Result<(), SendError>> {
        async move {
            let mut req = self.client.post(&self.url).json(&json!({
                "to": sms.phone,
                "body": sms.body,
                "reference": sms.job_id,
            }));
            if let Some(t) = &self.token {
                req = req.bearer_auth(t.expose());
            }
            let resp = req
                .send()
                .await
                .map_err(|e| SendError::Temporary(format!("provider unreachable: {e}")))?;
            let status = resp.status();
            if status.is_success() {
                Ok(())
            } else if status.as_u16() == 429 || status.is_server_error() {
                Err(SendError::Temporary(format!("provider answered {status}")))
            } else {
                Err(SendError::Permanent(format!(
                    "provider rejected the message: {status}"
                )))
            }
        }
        .boxed()
    }
}

/// Used when no provider URL is configured: every non-sandbox send fails permanently with a
/// message that names the missing setting, instead of pretending to send.
pub struct UnconfiguredProvider;

impl SmsProvider for UnconfiguredProvider {
    fn name(&self) -> &'static str {
        "unconfigured"
    }

    fn send<'a>(&'a self, _sms: &'a OutgoingSms) -> BoxFuture<'a, Result<(), SendError>> {
        async {
            Err(SendError::Permanent(
                "no SMS provider configured (set WALLET_SMS_PROVIDER_URL)".into(),
            ))
        }
        .boxed()
    }
}
