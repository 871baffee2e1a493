//! Sending SMS through a provider. Sandbox credentials always use the mock provider, whose
//! messages a sandbox caller reads at `GET /v1/sandbox/messages`; production credentials
//! use the HTTP provider. Nothing with a sandbox key ever reaches a real provider.
mod http_provider;
mod mock;

pub use http_provider::{HttpProvider, UnconfiguredProvider};
pub use mock::MockProvider;

use futures::future::BoxFuture;
use uuid::Uuid;

/// Sandbox numbers starting with this prefix make the mock provider fail every attempt,
/// so partners (and our tests) can watch retries and dead-lettering.
pub const SANDBOX_FAILING_PREFIX: &str = "+9990";

#[derive(Clone, Debug)]
pub struct OutgoingSms {
    /// The job that sends it; providers use it to deduplicate redeliveries.
    pub job_id: Uuid,
    pub integration_id: Uuid,
    pub merchant_id: Option<Uuid>,
    pub phone: String,
    /// `otp` or `enrollment`.
    pub kind: String,
    pub body: String,
    pub code: Option<String>,
    pub verification_token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth another attempt (timeout, 5xx, 429, connection refused).
    #[error("temporary: {0}")]
    Temporary(String),
    /// Will never succeed as is (rejected number, bad credentials).
    #[error("permanent: {0}")]
    Permanent(String),
}

pub trait SmsProvider: Send + Sync {
    fn name(&self) -> &'static str;
    fn send<'a>(&'a self, sms: &'a OutgoingSms) -> BoxFuture<'a, Result<(), SendError>>;
}
