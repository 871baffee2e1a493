//! The retry contract of every mutating call.
//!
//! A mutation runs inside `execute`: the domain change, its outbox rows and the
//! idempotency record (the exact response bytes) commit in one database transaction. Keys
//! are scoped to the integration. A retry with the same key and the same request replays
//! those bytes with `meta.idempotency_replayed: true` (the only difference); the same key
//! with a different request (body, route or calling scope) is IDEMPOTENCY_KEY_REUSED. A
//! retry that arrives while the first is still running waits up to `wait` for it and
//! replays its result, or gets 409 CONFLICT if it is still running then. A failure stores
//! nothing, so a retry after a 5xx or 429 runs again unless the original committed.
//!
//! Redis holds the in-flight lock and a short-lived copy of recent responses (a replay is
//! one Redis round trip); the database record is the truth, and its unique index on
//! (integration, key) is what makes a second execution impossible.
mod claim;
mod execute;
mod key;
mod presented;
mod replay;

use claim::*;
pub use execute::*;
pub use key::*;
pub use presented::*;
pub use replay::*;

use std::time::Duration;

use chrono::Utc;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::{
    domain::credentials::Principal, envelope, infra::crypto::Sealer, infra::kv::Kv,
    infra::kv::idempotency_keys,
};

/// The result of a mutation's domain work.
pub struct Outcome<T> {
    pub data: T,
    /// Secrets the response shows (a new raw key, a QR nonce), each a whole JSON string
    /// value of the response. They are stored sealed, never in plaintext, and put back into
    /// the replayed bytes.
    pub secrets: Vec<String>,
    /// Extra response meta (`data_completeness_score`).
    pub meta: envelope::MetaExtra,
    /// 200, or 202 for work accepted and done later (`accepted`); replays keep it.
    pub status: u16,
}

impl<T> Outcome<T> {
    pub fn new(data: T) -> Self {
        Outcome {
            data,
            secrets: Vec::new(),
            meta: envelope::MetaExtra::default(),
            status: 200,
        }
    }

    /// Work accepted now and done later (a report run): 202.
    pub fn accepted(data: T) -> Self {
        Outcome {
            status: 202,
            ..Outcome::new(data)
        }
    }

    pub fn with_secret(mut self, secret: String) -> Self {
        self.secrets.push(secret);
        self
    }
}

pub struct Request {
    pub integration_id: Uuid,
    pub key: String,
    /// Method and route with its path parameters (`POST /v1/auth/keys/{id}/revoke`).
    pub operation: String,
    pub fingerprint: String,
    /// Replay window of this operation when it differs from the default (a terminal token
    /// is replayed only while it is valid).
    pub ttl: Option<chrono::Duration>,
    /// The presenting API key's fingerprint: response copies are also kept under it.
    pub credential_fingerprint: Option<String>,
    /// A response copy fetched together with the principal.
    pub prefetched: Option<String>,
    /// See `Fetched::request_digest`.
    pub request_digest: Option<String>,
}

impl Request {
    /// The request of `principal` under `key` for `operation` with this body, with what the
    /// credential check fetched for the key.
    pub fn new(
        principal: &Principal,
        key: String,
        operation: String,
        body: &Value,
        fetched: Option<&Fetched>,
    ) -> Self {
        let fetched = fetched.cloned().unwrap_or_default();
        Request {
            integration_id: principal.integration_id,
            fingerprint: fingerprint(&operation, &principal.scope_fingerprint(), body),
            key,
            operation,
            ttl: None,
            credential_fingerprint: fetched.credential_fingerprint,
            prefetched: fetched.copy,
            request_digest: fetched.request_digest,
        }
    }

    /// The request of an operator (whose keys are namespaced by the operator's id, which
    /// never equals an integration's).
    pub fn for_operator(operator_id: Uuid, key: String, operation: String, body: &Value) -> Self {
        Request {
            integration_id: operator_id,
            fingerprint: fingerprint(&operation, &format!("operator:{operator_id}"), body),
            key,
            operation,
            ttl: None,
            credential_fingerprint: None,
            prefetched: None,
            request_digest: None,
        }
    }

    fn owner(&self) -> String {
        self.integration_id.to_string()
    }

    fn lock_key(&self) -> String {
        idempotency_keys::lock_key(self.integration_id, &self.key)
    }

    fn cache_key(&self) -> String {
        idempotency_keys::copy_key(self.integration_id, &self.key)
    }
}

pub use crate::infra::kv::idempotency_keys::copy_key;

pub struct Ctx<'a> {
    pub db: &'a crate::store::Db,
    pub kv: &'a Kv,
    pub sealer: &'a Sealer,
    /// How long a stored response can be replayed.
    pub ttl: chrono::Duration,
    /// How long a retry waits for a first request that is still running.
    pub wait: Duration,
    /// Embedded mode's copies of recent responses (production keeps them in Redis).
    pub recent: &'a RecentResponses,
}

/// Recent stored responses by (owner, Idempotency-Key), bounded so that a busy embedded
/// service does not hold every response of the replay window in memory.
pub type RecentResponses = crate::infra::cache::TtlCache<(String, String), Stored>;

pub fn recent_responses() -> RecentResponses {
    crate::infra::cache::TtlCache::new(CACHE_TTL, 4096)
}

/// A stored response, from the database or its Redis copy.
#[derive(Clone, Serialize, serde::Deserialize)]
pub struct Stored {
    id: Uuid,
    operation: String,
    fingerprint: String,
    status: u16,
    /// Follows the other fields' JSON line in a copy, as it is: unescaped, it costs a
    /// replay no parsing.
    #[serde(skip)]
    body: String,
    sealed: Option<String>,
    #[serde(with = "crate::infra::timestamp")]
    expires_at: chrono::DateTime<Utc>,
    /// The digest of the request that stored this response (see `request_digest`); only
    /// copies made by that request carry it, the database record does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_digest: Option<String>,
}

impl Stored {
    /// The Redis copy: the fields other than the body as one JSON line, then the body.
    fn to_copy(&self) -> Option<String> {
        let mut text = serde_json::to_string(self).ok()?;
        text.push('\n');
        text.push_str(&self.body);
        Some(text)
    }

    fn from_copy(text: &str) -> Option<Stored> {
        let (head, body) = text.split_once('\n')?;
        let mut s: Stored = serde_json::from_str(head).ok()?;
        s.body = body.to_string();
        Some(s)
    }
}

impl From<entities::idempotency_record::Model> for Stored {
    fn from(m: entities::idempotency_record::Model) -> Self {
        Stored {
            id: m.id,
            operation: m.operation,
            fingerprint: m.request_fingerprint,
            status: u16::try_from(m.status_code).unwrap_or(200),
            body: m.response_body,
            sealed: m.sealed_secret,
            expires_at: m.expires_at,
            request_digest: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprints_ignore_key_order_and_transport_meta() {
        let a = json!({"meta": {"api_version": "2026-06-01", "sent_at": "2026-01-01T00:00:00Z"}, "x": 1, "y": [1, {"b": 2, "a": 1}]});
        let b = json!({"y": [1, {"a": 1, "b": 2}], "x": 1, "meta": {"sent_at": "2026-02-02T00:00:00Z", "api_version": "2026-06-01"}});
        assert_eq!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/x", "s", &b)
        );
        let c = json!({"meta": {"api_version": "2026-06-01"}, "x": 2, "y": [1, {"a": 1, "b": 2}]});
        assert_ne!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/x", "s", &c)
        );
        assert_ne!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/z", "s", &a)
        );
        assert_ne!(
            fingerprint("POST /v1/x", "s", &a),
            fingerprint("POST /v1/x", "t", &a)
        );
    }

    /// The digest input as records stored before the streaming writer were fingerprinted.
    fn stored_form(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for k in keys {
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    stored_form(&m[k], out);
                    out.push(',');
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for x in a {
                    stored_form(x, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    #[test]
    fn fingerprints_of_stored_records_still_match() {
        let body = json!({"meta": {"api_version": "2026-06-01", "partner_request_id": "p", "sent_at": "t"},
            "s": "a\"b\u{e9}\n", "n": -1.5, "z": null, "t": true, "l": [{"k": "v"}, [], {}],
            "nested": {"meta": {"sent_at": "kept below the top level"}}});
        let mut trimmed = body.clone();
        let meta = trimmed["meta"].as_object_mut().unwrap();
        meta.remove("sent_at");
        meta.remove("partner_request_id");
        let mut form = String::new();
        stored_form(&trimmed, &mut form);
        let mut h = Sha256::new();
        h.update(b"POST /v1/x\ns\n");
        h.update(form.as_bytes());
        assert_eq!(
            fingerprint("POST /v1/x", "s", &body),
            hex::encode(h.finalize())
        );
    }

    #[test]
    fn a_copy_gives_back_the_stored_response_exactly() {
        let s = Stored {
            id: Uuid::now_v7(),
            operation: "POST /v1/payments".into(),
            fingerprint: "f".into(),
            status: 402,
            body: "{\"a\":\"line\\nbreak\"}\n\nand raw newlines".into(),
            sealed: Some("v1.x".into()),
            expires_at: Utc::now(),
            request_digest: Some("d".into()),
        };
        let back = Stored::from_copy(&s.to_copy().unwrap()).unwrap();
        assert_eq!(
            (
                back.id,
                back.status,
                &back.body,
                &back.sealed,
                back.expires_at,
                &back.request_digest
            ),
            (
                s.id,
                s.status,
                &s.body,
                &s.sealed,
                s.expires_at,
                &s.request_digest
            )
        );
        assert!(Stored::from_copy("{\"not\": \"a copy\"}").is_none());
    }

    #[test]
    fn an_operation_is_the_method_and_path_with_ids_in_canonical_case() {
        assert_eq!(
            operation(
                "POST",
                "/v1/payments/0191C1C0-7F3E-7A44-B1A6-1F2D3C4B5A69/refund"
            ),
            "POST /v1/payments/0191c1c0-7f3e-7a44-b1a6-1f2d3c4b5a69/refund"
        );
        // Only ids: other segments (a SKU code) keep their spelling.
        assert_eq!(
            operation("POST", "/v1/topup/sku/Gift-CARD-50"),
            "POST /v1/topup/sku/Gift-CARD-50"
        );
    }

    #[test]
    fn the_key_must_be_a_uuid() {
        assert!(parse_key(Some("0191c1c0-7f3e-7a44-b1a6-1f2d3c4b5a69")).is_ok());
        for bad in [
            None,
            Some(""),
            Some("abc"),
            Some("0191c1c07f3e7a44b1a61f2d3c4b5a69"),
        ] {
            let e = parse_key(bad).unwrap_err();
            assert_eq!(e.code(), crate::error::ErrorCode::ValidationError);
        }
    }
}
