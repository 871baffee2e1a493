//! What a job handler is given: the shared state and the job runners' own clients. The
//! runtime builds it; every job reads it.
use std::sync::Arc;

use crate::{jobs::sms::SmsProvider, state::AppState};

/// What job handlers need.
pub struct JobDeps {
    pub state: AppState,
    /// Sandbox credentials' provider.
    pub sms_mock: Arc<dyn SmsProvider>,
    /// Everyone else's.
    pub sms_live: Arc<dyn SmsProvider>,
    /// Webhook deliveries: the published timeout, no redirects followed.
    pub http: reqwest::Client,
    /// Webhook requests in flight in this process (`WALLET_WEBHOOK_CONCURRENCY`), whichever
    /// job sends them.
    pub webhook_slots: tokio::sync::Semaphore,
}
