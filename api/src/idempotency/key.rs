//! What names a request: its Idempotency-Key (a UUID, parsed once), its operation (method
//! and path) and its fingerprint (operation, scope and body, canonical).

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The operation a key is used for: the method and the path as requested, its ids
/// spelled the canonical way (lower case), so a retry that writes an id in capitals is the
/// same request, as it is to the operation itself.
pub fn operation(method: &str, path: &str) -> String {
    let mut out = String::with_capacity(method.len() + 1 + path.len());
    out.push_str(method);
    out.push(' ');
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        if segment.len() == 36 && Uuid::parse_str(segment).is_ok() {
            out.push_str(&segment.to_ascii_lowercase());
        } else {
            out.push_str(segment);
        }
    }
    out
}

/// What identifies "the same request": the operation (method and route), the calling
/// credential's scope, and the body with JSON object keys in sorted order and the
/// transport-only meta fields (`sent_at`, `partner_request_id`) left out, since a faithful
/// retry may legitimately change them.
pub fn fingerprint(operation: &str, scope: &str, body: &Value) -> String {
    let mut h = Sha256::new();
    h.update(operation.as_bytes());
    h.update(b"\n");
    h.update(scope.as_bytes());
    h.update(b"\n");
    write_canonical(body, &mut h, true);
    crate::infra::crypto::hex(&h.finalize())
}

/// Canonical JSON (keys sorted, compact) written straight into the digest, without
/// `meta.sent_at` and the correlation ids `meta.partner_request_id` and
/// `meta.decision_trace_id`, which may differ between retries of one request. The same bytes as serialising the trimmed value, so stored fingerprints keep
/// matching.
pub(super) fn write_canonical(v: &Value, h: &mut Sha256, top: bool) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                write_json(k, h);
                h.update(b":");
                match &m[k] {
                    Value::Object(meta) if top && k == "meta" => {
                        let trimmed: serde_json::Map<String, Value> = meta
                            .iter()
                            .filter(|(f, _)| {
                                !matches!(
                                    f.as_str(),
                                    "sent_at" | "partner_request_id" | "decision_trace_id"
                                )
                            })
                            .map(|(f, x)| (f.clone(), x.clone()))
                            .collect();
                        write_canonical(&Value::Object(trimmed), h, false);
                    }
                    x => write_canonical(x, h, false),
                }
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(a) => {
            h.update(b"[");
            for x in a {
                write_canonical(x, h, false);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => write_json(other, h),
    }
}

pub(super) fn write_json<T: Serialize + ?Sized>(v: &T, h: &mut Sha256) {
    struct Digest<'a>(&'a mut Sha256);
    impl std::io::Write for Digest<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Serialising a string or a number into a digest cannot fail.
    let _ = serde_json::to_writer(Digest(h), v);
}

/// The exact request: the calling scope, the operation as sent (method and path) and the
/// body's bytes. Equal digests are the same request; a faithful retry may still differ
/// in its bytes (key order, a new `meta.sent_at`), which `fingerprint` then decides.
pub fn request_digest(scope: &str, operation: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(scope.as_bytes());
    h.update(b"\n");
    h.update(operation.as_bytes());
    h.update(b"\n");
    h.update(body);
    crate::infra::crypto::hex(&h.finalize())
}
