//! How a QR nonce and a short code are kept: never as given, only as a digest to find them
//! by. A leaf: minting, paying, the balance check and identification share it.
use uuid::Uuid;

use crate::infra::crypto::Sealer;

/// A short code's keyed digest: codes are short, so a plain hash could be reversed by
/// trying them all; the service's key makes that impossible without it.
pub(crate) fn short_code_hash(sealer: &Sealer, merchant: Uuid, code: &str) -> String {
    sealer.mac("short_code", format!("{merchant}:{code}").as_bytes())
}

/// A QR nonce's digest (the nonce is long and random: a plain hash suffices).
pub(crate) fn nonce_hash(nonce: &str) -> String {
    crate::infra::crypto::sha256_hex(nonce.as_bytes())
}
