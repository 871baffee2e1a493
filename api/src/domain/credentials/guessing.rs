//! What keeps a caller from finding live codes or customers' phones by trying them. Every
//! identification counts against its integration's identify rate (identify, the cashier
//! lookup, session identify, and every route that resolves a customer from an identifier),
//! and a code that can be guessed (a short code) is refused while the caller's
//! terminal, branch or merchant has too many failed credentials (`domain::risk::failures`).
//! Each check runs outside the caller's database transaction: before it opens, or after
//! it ended.
use crate::domain::{
    credentials::{Principal, scope::Acting},
    customers::IdentityCredential,
    risk::failures::{Entry, Failures, Till},
};
use crate::{
    config::Config,
    error::{ApiError, RateLimitInfo},
    infra::{kv::Kv, ratelimit},
    store::Db,
};

pub struct Guard<'a> {
    pub kv: &'a Kv,
    pub config: &'a Config,
    pub db: &'a Db,
}

/// The entry an identity credential is, when it is one that can be guessed.
pub fn entry_of(credential: &IdentityCredential) -> Option<Entry> {
    match credential {
        IdentityCredential::ShortCode(_) => Some(Entry::ShortCode),
        IdentityCredential::Qr(_) => Some(Entry::Qr),
        _ => None,
    }
}

impl Guard<'_> {
    pub fn failures(&self) -> Failures<'_> {
        Failures {
            kv: self.kv,
            config: self.config,
            db: self.db,
        }
    }

    /// Before a customer is resolved from `credential`: RATE_LIMITED past the
    /// integration's identify rate, or for a short code while the caller's till is blocked. The rate as it stands after this identification.
    pub async fn before_identifying(
        &self,
        principal: &Principal,
        acting: &Acting,
        credential: &IdentityCredential,
    ) -> Result<RateLimitInfo, ApiError> {
        let rate = ratelimit::check(
            self.kv,
            self.config,
            &format!("identify:{}", principal.integration_id),
            principal.is_sandbox,
        )
        .await?;
        if entry_of(credential).is_some_and(Entry::guessable) {
            self.failures().before(&Till::of(acting)).await?;
        }
        Ok(rate)
    }

    /// After: a short code or QR payload that named no live mint was a failed credential
    /// (as at payment).
    pub async fn after_identifying(
        &self,
        acting: &Acting,
        credential: &IdentityCredential,
        found: bool,
    ) -> Result<(), ApiError> {
        match entry_of(credential) {
            Some(entry) if !found => self.failures().failed(&Till::of(acting), entry).await,
            _ => Ok(()),
        }
    }

    /// Before a payment credential is tried (a payment, a balance check): a short code is
    /// refused while the caller's till is blocked (`Entry::guessable`).
    pub async fn before_trying(&self, till: &Till, entry: Entry) -> Result<(), ApiError> {
        if entry.guessable() {
            self.failures().before(till).await?;
        }
        Ok(())
    }

    /// After: a credential refused as wrong (unknown, expired, used, a wrong OTP) counts.
    pub async fn after_trying(
        &self,
        till: Option<&Till>,
        entry: Option<Entry>,
        refused: Option<&ApiError>,
    ) -> Result<(), ApiError> {
        self.failures().after(till, entry, refused).await
    }
}
