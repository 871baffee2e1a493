//! A request's Idempotency-Key as presented: the header parsed once, by the HTTP pipeline's
//! first layer that needs it (`http::pipeline::early_replay`), and carried in the request's extensions together with what the
//! credential check fetched for it. Everything else reads it from there: the early replay,
//! the API-key check (which fetches the response copy in the round trip it already makes)
//! and the mutation extractor. Nothing about idempotency rides on the caller's `Principal`.
use std::sync::{Arc, OnceLock};

use crate::{domain::validate, error::ApiError, error::FieldError};

/// The `Idempotency-Key` header of one request.
#[derive(Debug, Default)]
pub struct Presented {
    /// `None`: no header. `Some(Err)`: not a UUID, reported when an operation asks.
    key: Option<Result<String, FieldError>>,
    fetched: OnceLock<Fetched>,
}

/// What the API-key check learnt for this request's key, in the round trip it makes anyway.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    /// The presenting API key's cache fingerprint: response copies are also kept under it,
    /// where the next check of the same key finds them.
    pub credential_fingerprint: Option<String>,
    /// The copy of a stored response for this key, fetched with the key's principal.
    pub copy: Option<String>,
    /// The digest of this exact request (scope, method and path, body bytes), when the
    /// early replay computed it: a stored response keeps it, so a retry of the same bytes
    /// is recognised without parsing its body.
    pub request_digest: Option<String>,
}

impl Presented {
    /// Parses the header's value (the first readable one; `None` when absent).
    pub fn parse(value: Option<&str>) -> Arc<Presented> {
        let key = value.map(|v| {
            let mut errs = validate::Errors::default();
            match validate::uuid(&mut errs, "header:Idempotency-Key", v.trim()) {
                Some(u) => Ok(u.to_string()),
                None => Err(errs.0.remove(0)),
            }
        });
        Arc::new(Presented {
            key,
            fetched: OnceLock::new(),
        })
    }

    /// The key: `Ok(None)` when absent and optional; a VALIDATION_ERROR on
    /// `header:Idempotency-Key` when absent and `required`, or not a UUID.
    pub fn key(&self, required: bool) -> Result<Option<String>, ApiError> {
        match &self.key {
            Some(Ok(k)) => Ok(Some(k.clone())),
            Some(Err(e)) => Err(ApiError::validation(vec![e.clone()])),
            None if required => Err(ApiError::field(
                "header:Idempotency-Key",
                "required",
                "the Idempotency-Key header (a UUID) is required on this operation",
            )),
            None => Ok(None),
        }
    }

    /// The key when it is a UUID, for the layers that only act on a well-formed one.
    pub fn well_formed(&self) -> Option<&str> {
        match &self.key {
            Some(Ok(k)) => Some(k),
            _ => None,
        }
    }

    /// Keeps what the credential check fetched; the first check of a request wins.
    pub fn remember(&self, fetched: Fetched) {
        let _ = self.fetched.set(fetched);
    }

    /// What the credential check fetched, if it ran and knew the key.
    pub fn fetched(&self) -> Option<&Fetched> {
        self.fetched.get()
    }
}

/// Parses the `Idempotency-Key` header value: a UUID, required.
pub fn parse_key(value: Option<&str>) -> Result<String, ApiError> {
    Presented::parse(value)
        .key(true)
        .map(|k| k.unwrap_or_default())
}
