//! Every key the idempotency contract keeps in the key-value store, named in one place:
//! the in-flight lock and the response copy of an integration's Idempotency-Key (one hash
//! tag, so a cluster keeps both in one slot, read and written by one script), and the copy
//! kept beside the API key that made the response (fetched with the key's principal in the
//! key check's one round trip). A leaf, so the key check (`domain`) and the idempotency layer
//! above it share it.
use uuid::Uuid;

/// The lock a first request holds while its work runs.
pub fn lock_key(integration_id: Uuid, key: &str) -> String {
    slot_tagged("idem:lock:", integration_id, key)
}

/// Where a recent copy of the integration's response under `key` is kept (Redis in
/// production), beside its in-flight lock.
pub fn copy_key(integration_id: Uuid, key: &str) -> String {
    slot_tagged("idem:resp:", integration_id, key)
}

/// The response copy kept for the API key that made it (by the key's fingerprint).
pub fn credential_copy_key(credential_fingerprint: &str, idempotency_key: &str) -> String {
    format!("idem:resp:cred:{credential_fingerprint}:{idempotency_key}")
}

/// The lock and the copy are read and written by one script: one hash tag, the
/// integration's key, keeps them in one slot of a cluster (and spreads keys across
/// slots). The first `{…}` is the tag whatever the key holds, and both names share it:
/// `{name}{{integration_id}:{key}}`, built in one allocation (every request with an
/// Idempotency-Key names them several times).
fn slot_tagged(name: &str, integration_id: Uuid, key: &str) -> String {
    let mut uuid = Uuid::encode_buffer();
    let uuid = integration_id.hyphenated().encode_lower(&mut uuid);
    let mut s = String::with_capacity(name.len() + uuid.len() + key.len() + 3);
    s.push_str(name);
    s.push('{');
    s.push_str(uuid);
    s.push(':');
    s.push_str(key);
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_and_the_copy_share_the_integrations_hash_tag() {
        let id = Uuid::parse_str("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").unwrap();
        assert_eq!(
            lock_key(id, "order-42:{x}"),
            "idem:lock:{0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:order-42:{x}}"
        );
        assert_eq!(
            copy_key(id, "k"),
            "idem:resp:{0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:k}"
        );
    }
}
