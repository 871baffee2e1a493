//! Sealing secrets that must be kept for a while but never in plaintext: the raw key inside
//! a stored key-create response (for its idempotent replay) and the codes inside queued
//! SMS jobs. XChaCha20-Poly1305 with a random 24-byte nonce; the associated data binds a
//! sealed value to the row it belongs to, so it cannot be moved to another.
use base64::{Engine, engine::general_purpose::STANDARD};
use chacha20poly1305::{
    XChaCha20Poly1305, XNonce,
    aead::{Aead, KeyInit, Payload},
};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

#[derive(Clone)]
pub struct Sealer {
    cipher: XChaCha20Poly1305,
    /// HMAC-SHA256 with its key already absorbed: the key schedule is two of the four
    /// SHA-256 compressions of a short message's digest, done here once rather than per
    /// digest (an OTP check, a short code). Each digest starts from a clone of it.
    mac: Hmac<Sha256>,
}

#[derive(Debug, thiserror::Error)]
#[error("sealed value could not be opened")]
pub struct OpenError;

impl Sealer {
    /// Derives the 256-bit key from the configured secret (any length >= 32 bytes).
    pub fn new(secret: &[u8]) -> Self {
        let key = Sha256::new()
            .chain_update(b"wallet-sealer-v1")
            .chain_update(secret)
            .finalize();
        let mac_key = Sha256::new()
            .chain_update(b"wallet-mac-v1")
            .chain_update(secret)
            .finalize();
        Sealer {
            cipher: XChaCha20Poly1305::new_from_slice(&key).expect("32-byte key"),
            mac: <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(&mac_key).expect("any key length"),
        }
    }

    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> String {
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).expect("the operating system CSPRNG is unavailable");
        let ct = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .expect("encryption with a valid key cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        format!("v1.{}", STANDARD.encode(out))
    }

    /// A keyed digest (HMAC-SHA256, hex) for values too small to hash plainly, such as a
    /// 6-digit code: without the server secret a stolen digest cannot be brute-forced.
    pub fn mac(&self, purpose: &str, data: &[u8]) -> String {
        let mut m = self.mac.clone();
        m.update(purpose.as_bytes());
        m.update(b"\n");
        m.update(data);
        hex(&m.finalize().into_bytes())
    }

    /// Whether `data` has the digest `expected`, compared in constant time.
    pub fn verify_mac(&self, purpose: &str, data: &[u8], expected: &str) -> bool {
        use subtle::ConstantTimeEq;
        self.mac(purpose, data)
            .as_bytes()
            .ct_eq(expected.as_bytes())
            .into()
    }

    pub fn open(&self, sealed: &str, aad: &[u8]) -> Result<Vec<u8>, OpenError> {
        let raw = STANDARD
            .decode(sealed.strip_prefix("v1.").ok_or(OpenError)?)
            .map_err(|_| OpenError)?;
        if raw.len() < 24 + 16 {
            return Err(OpenError);
        }
        let (nonce, ct) = raw.split_at(24);
        let nonce: [u8; 24] = nonce.try_into().map_err(|_| OpenError)?;
        self.cipher
            .decrypt(&XNonce::from(nonce), Payload { msg: ct, aad })
            .map_err(|_| OpenError)
    }
}

/// Lowercase hex of `bytes`. `hex::encode` builds its text one `char` at a time through an
/// iterator, several times slower; the request digests and key fingerprints computed on
/// every request go through this instead.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    ::hex::encode_to_slice(bytes, &mut out).expect("the buffer is twice the input");
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cipher_gives_the_published_answer_with_the_backend_this_build_chose() {
        // draft-arciszewski-xchacha-03, appendix A.3.1. `.cargo/config.toml` picks
        // poly1305's portable backend: what any conforming build sealed must still open.
        let h = |s: &str| ::hex::decode(s).unwrap();
        let cipher = XChaCha20Poly1305::new_from_slice(&h(
            "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f",
        ))
        .unwrap();
        let nonce: [u8; 24] = h("404142434445464748494a4b4c4d4e4f5051525354555657")
            .try_into()
            .unwrap();
        let nonce = XNonce::from(nonce);
        let aad = h("50515253c0c1c2c3c4c5c6c7");
        let plaintext: &[u8] = b"Ladies and Gentlemen of the class of '99: If I could offer you \
            only one tip for the future, sunscreen would be it.";
        let sealed = h(concat!(
            "bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb",
            "731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b452",
            "2f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff9",
            "21f9664c97637da9768812f615c68b13b52e",
            "c0875924c1c7987947deafd8780acf49",
        ));
        let payload = |msg| Payload { msg, aad: &aad };
        assert_eq!(cipher.encrypt(&nonce, payload(plaintext)).unwrap(), sealed);
        assert_eq!(
            cipher.decrypt(&nonce, payload(sealed.as_slice())).unwrap(),
            plaintext
        );
    }

    #[test]
    fn hex_is_the_lowercase_hex_of_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex(&all), ::hex::encode(&all));
        assert_eq!(hex(&[]), "");
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_digest_is_rfc_2104_hmac_sha256_under_the_derived_key() {
        // Stored OTP and short-code digests were made with a key set up per digest; the
        // key absorbed once must give the same ones.
        let secret = [7u8; 32];
        let key = Sha256::new()
            .chain_update(b"wallet-mac-v1")
            .chain_update(secret)
            .finalize();
        let (mut inner, mut outer) = (Sha256::new(), Sha256::new());
        let pad = |b: u8| key.iter().copied().chain([0; 32]).map(move |k| k ^ b);
        inner.update(pad(0x36).collect::<Vec<u8>>());
        inner.update(b"otp\nsession:123456");
        outer.update(pad(0x5c).collect::<Vec<u8>>());
        outer.update(inner.finalize());
        let s = Sealer::new(&secret);
        for _ in 0..2 {
            assert_eq!(
                s.mac("otp", b"session:123456"),
                hex(&outer.clone().finalize())
            );
        }
        assert!(s.verify_mac("otp", b"session:123456", &hex(&outer.finalize())));
        assert!(!s.verify_mac("otp", b"session:123457", &s.mac("otp", b"session:123456")));
    }

    #[test]
    fn sealed_values_open_only_with_the_same_key_and_row() {
        let s = Sealer::new(&[7u8; 32]);
        let sealed = s.seal(b"wk_live_secret", b"row-1");
        assert!(!sealed.contains("wk_live_secret"));
        assert_eq!(s.open(&sealed, b"row-1").unwrap(), b"wk_live_secret");
        assert!(s.open(&sealed, b"row-2").is_err());
        assert!(Sealer::new(&[8u8; 32]).open(&sealed, b"row-1").is_err());
    }
}
