//! What keeps a caller from finding live codes or customers' phones by trying them. Every
//! identification counts against its integration's identify rate (identify, the cashier
//! lookup, session identify, and every route that resolves a customer from an identifier),
//! and while an integration has too many failed short codes, a short code is refused for
//! identification, payment and balance check alike. Each check runs outside the caller's
//! database transaction: before it opens, or after it ended.
use uuid::Uuid;

use crate::domain::{credentials::Principal, customers::IdentityCredential};
use crate::{
    config::Config,
    error::{ApiError, ErrorCode, RateLimitInfo},
    infra::{kv::Kv, ratelimit},
};

/// Failed short-code guesses per integration per minute before RATE_LIMITED: a short code
/// has about 28 million values, so guessing must stay slow.
pub const SHORT_CODE_FAILURES_PER_MIN: u64 = 20;

pub struct Guard<'a> {
    pub kv: &'a Kv,
    pub config: &'a Config,
}

impl Guard<'_> {
    /// Before a customer is resolved from `credential`: RATE_LIMITED past the
    /// integration's identify rate, or for a short code while the integration is over its
    /// failed-guess cap. The rate as it stands after this identification.
    pub async fn before_identifying(
        &self,
        principal: &Principal,
        credential: &IdentityCredential,
    ) -> Result<RateLimitInfo, ApiError> {
        let rate = ratelimit::check(
            self.kv,
            self.config,
            &format!("identify:{}", principal.integration_id),
            principal.is_sandbox,
        )
        .await?;
        if matches!(credential, IdentityCredential::ShortCode(_)) {
            self.short_code_guard(principal.integration_id).await?;
        }
        Ok(rate)
    }

    /// After: a short code that named no live mint was a failed guess (as at payment).
    pub async fn after_identifying(
        &self,
        integration: Uuid,
        credential: &IdentityCredential,
        found: bool,
    ) -> Result<(), ApiError> {
        if !found && matches!(credential, IdentityCredential::ShortCode(_)) {
            self.short_code_failed(integration).await?;
        }
        Ok(())
    }

    /// Before a payment credential is tried (a payment, a balance check): a short code is
    /// refused while the integration is over its failed-guess cap.
    pub async fn before_trying(&self, integration: Uuid, short_code: bool) -> Result<(), ApiError> {
        if short_code {
            self.short_code_guard(integration).await?;
        }
        Ok(())
    }

    /// After: a short code refused as unknown, expired or used was a failed guess.
    pub async fn after_trying(
        &self,
        integration: Uuid,
        short_code: bool,
        refused: Option<&ApiError>,
    ) -> Result<(), ApiError> {
        if short_code && refused.is_some_and(|e| e.code() == ErrorCode::CredentialExpiredOrReplayed)
        {
            self.short_code_failed(integration).await?;
        }
        Ok(())
    }

    /// RATE_LIMITED while the integration has too many recent failed short codes.
    async fn short_code_guard(&self, integration: Uuid) -> Result<(), ApiError> {
        let count = self
            .kv
            .get(&short_code_failures_key(integration))
            .await?
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if count >= SHORT_CODE_FAILURES_PER_MIN {
            return Err(ApiError::rate_limited(
                RateLimitInfo {
                    limit: SHORT_CODE_FAILURES_PER_MIN,
                    remaining: 0,
                    reset_secs: 60,
                    window_secs: 60,
                },
                60,
            )
            .with_message("Too many failed short codes; wait, or pay by QR or OTP."));
        }
        Ok(())
    }

    /// Counts one failed short-code guess of the integration.
    async fn short_code_failed(&self, integration: Uuid) -> Result<(), ApiError> {
        self.kv
            .incr_window(
                &short_code_failures_key(integration),
                std::time::Duration::from_secs(60),
            )
            .await
            .map(|_| ())
    }
}

fn short_code_failures_key(integration: Uuid) -> String {
    format!("shortcode:fail:{integration}")
}
