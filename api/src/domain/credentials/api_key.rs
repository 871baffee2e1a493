//! The shape of a raw API key: `<prefix>_<segment>_<base64url of 24 random bytes>`.
//!
//! The raw key is shown once. The service stores only a bcrypt hash, the `key_prefix`
//! (prefix, segment and the first 4 random characters, used to find the row) and the last
//! four characters.
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};

pub const PREFIX: &str = "wk";
/// Operator keys have their own prefix, so neither kind can pass for the other.
pub const OPERATOR_PREFIX: &str = "wo";
const RANDOM_BYTES: usize = 24;
/// base64url without padding of 24 bytes.
const RANDOM_CHARS: usize = 32;
/// Characters of the random part that `key_prefix` keeps.
const PREFIX_RANDOM_CHARS: usize = 4;

pub struct MintedKey {
    pub raw: String,
    pub key_prefix: String,
    pub key_last_four: String,
}

/// Draws a new partner key from the operating system's CSPRNG; its segment is `live` or
/// `test`, then the cell it was minted in, if any (`domain::platform::cells`).
pub fn mint(is_sandbox: bool, cell: Option<&str>) -> MintedKey {
    let env = if is_sandbox { "test" } else { "live" };
    mint_with(PREFIX, &format!("{env}{}", cell.unwrap_or_default()))
}

/// The segment of a presented partner key, or `None` when it cannot be one of ours.
pub fn segment(raw: &str) -> Option<&str> {
    split(raw)?;
    let rest = raw.strip_prefix(PREFIX)?.strip_prefix('_')?;
    Some(rest.split_once('_')?.0)
}

/// Draws a new key of any kind: `<prefix>_<segment>_<32 base64url characters>`.
pub fn mint_with(prefix: &str, segment: &str) -> MintedKey {
    let mut bytes = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut bytes).expect("the operating system CSPRNG is unavailable");
    let raw = format!("{prefix}_{segment}_{}", URL_SAFE_NO_PAD.encode(bytes));
    let (key_prefix, key_last_four) = split_with(prefix, &raw).expect("a minted key always parses");
    MintedKey {
        key_prefix: key_prefix.to_string(),
        key_last_four: key_last_four.to_string(),
        raw,
    }
}

/// `(key_prefix, key_last_four)` of a presented partner key, or `None` when it cannot be
/// one of ours.
pub fn split(raw: &str) -> Option<(&str, &str)> {
    split_with(PREFIX, raw)
}

pub fn split_with<'a>(prefix: &str, raw: &'a str) -> Option<(&'a str, &'a str)> {
    if raw.len() > 100 || !raw.is_ascii() {
        return None;
    }
    let rest = raw.strip_prefix(prefix)?.strip_prefix('_')?;
    let (segment, random) = rest.split_once('_')?;
    if segment.is_empty()
        || !segment.bytes().all(|b| b.is_ascii_alphanumeric())
        || random.len() != RANDOM_CHARS
        || !random
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    let cut = raw.len() - RANDOM_CHARS + PREFIX_RANDOM_CHARS;
    Some((&raw[..cut], &raw[raw.len() - 4..]))
}

/// The cache key of a raw key: a SHA-256, so the raw key never sits in Redis.
pub fn cache_fingerprint(raw: &str) -> String {
    crate::infra::crypto::sha256_hex(raw.as_bytes())
}

pub fn hash(raw: &str, cost: u32) -> Result<String, bcrypt::BcryptError> {
    bcrypt::hash(raw, cost)
}

pub fn verify(raw: &str, hash: &str) -> bool {
    bcrypt::verify(raw, hash).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_keys_have_the_documented_form() {
        let k = mint(false, None);
        assert!(k.raw.starts_with("wk_live_"));
        assert_eq!(k.raw.len(), "wk_live_".len() + 32);
        assert_eq!(k.key_prefix.len(), "wk_live_".len() + 4);
        assert!(k.raw.starts_with(&k.key_prefix));
        assert!(k.raw.ends_with(&k.key_last_four));
        assert!(mint(true, None).raw.starts_with("wk_test_"));
    }

    #[test]
    fn two_minted_keys_differ() {
        assert_ne!(mint(false, None).raw, mint(false, None).raw);
    }

    #[test]
    fn foreign_strings_are_not_keys() {
        for bad in [
            "",
            "wk_live_short",
            "sk_live_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "wk__aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "wk_live_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
        ] {
            assert!(split(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_random_part_may_contain_underscores() {
        let raw = "wk_live_ab_d_fghijklmnopqrstuvwxyz012345";
        assert_eq!(raw.len(), "wk_live_".len() + 32);
        let (p, l) = split(raw).unwrap();
        assert_eq!(p, "wk_live_ab_d");
        assert_eq!(l, "2345");
    }
}
