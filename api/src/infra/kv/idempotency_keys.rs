//! Every key the idempotency contract keeps in the key-value store, named in one place:
//! the in-flight lock and the response copy of an integration's Idempotency-Key (one hash
//! tag, so a cluster keeps both in one slot, read and written by one script), and the copy
//! kept beside the API key that made the response (fetched with the key's principal in the
//! key check's one round trip). A leaf, so the key check (`domain`) and the idempotency layer
//! above it share it.
use uuid::Uuid;

/// The lock a first request holds while its work runs.
pub fn lock_key(integration_id: Uuid, key: &str) -> String {
    format!("idem:lock:{}", slot_tag(integration_id, key))
}

/// Where a recent copy of the integration's response under `key` is kept (Redis in
/// production), beside its in-flight lock.
pub fn copy_key(integration_id: Uuid, key: &str) -> String {
    format!("idem:resp:{}", slot_tag(integration_id, key))
}

/// The response copy kept for the API key that made it (by the key's fingerprint).
pub fn credential_copy_key(credential_fingerprint: &str, idempotency_key: &str) -> String {
    format!("idem:resp:cred:{credential_fingerprint}:{idempotency_key}")
}

/// The lock and the copy are read and written by one script: one hash tag, the
/// integration's key, keeps them in one slot of a cluster (and spreads keys across
/// slots). The first `{…}` is the tag whatever the key holds, and both names share it.
fn slot_tag(integration_id: Uuid, key: &str) -> String {
    format!("{{{integration_id}:{key}}}")
}
