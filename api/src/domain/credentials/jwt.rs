//! Terminal JWTs: HS256, `iss` service-pos-terminal, `aud` service-api, 600-second TTL.
//! Secrets carry a `kid` so a secret can rotate while tokens it signed stay valid.
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use chrono::{DateTime, TimeZone, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, errors::ErrorKind};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::credentials::{CredentialKind, Principal, Scope};

pub const ISSUER: &str = "service-pos-terminal";
pub const AUDIENCE: &str = "service-api";
pub const TTL_SECS: i64 = 600;
/// How far a token's `iat` or `nbf` may lie ahead of this server's clock (clocks of the
/// replicas that mint and check tokens differ a little); further ahead, it is refused.
pub const CLOCK_SKEW_SECS: i64 = 30;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub iss: String,
    /// One audience; a token naming several (an array) is ours if one of them is.
    #[serde(deserialize_with = "one_audience")]
    pub aud: String,
    pub sub: String,
    pub iat: i64,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    pub jti: String,
    pub integration_id: Uuid,
    pub enterprise_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brand_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cashier_id: Option<String>,
    /// The terminal the token was minted for (`context.terminal_id` of the exchange): the
    /// till its failed credentials are counted against (`domain::risk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_id: Option<String>,
    pub sandbox: bool,
    /// The API key the token was minted from.
    pub key_id: Uuid,
    /// The cell that minted it, where there are several (`domain::platform::cells`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<String>,
}

/// Why a token is not valid, as `GET /auth/token/validate` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Invalid {
    Expired,
    Malformed,
    WrongAudience,
    BadSignature,
}

#[derive(Clone)]
pub struct JwtKeys {
    current_kid: String,
    current: (EncodingKey, DecodingKey),
    previous: Vec<(String, DecodingKey)>,
    /// This deployment's cell: tokens name it, and one naming another is not for us.
    cell: Option<String>,
    verified: Arc<Mutex<Verified>>,
}

/// Tokens whose signature, issuer and audience these keys checked, by the token's exact
/// text, with their claims. A terminal sends one token with every request of its ten
/// minutes, and the check (two base64 decodes, the HMAC, the claims read twice) was 7% of a
/// payment's instructions. What a token says cannot change while the keys do not, so only
/// its times are checked again; a token never verified (a forgery included) takes the whole
/// check and is not kept.
#[derive(Default)]
struct Verified {
    tokens: HashMap<Box<str>, Claims>,
}

/// Tokens kept at most: a few megabytes (a token and its claims are under 1 KiB), far
/// more terminals than one process serves within a token's lifetime.
const VERIFIED_MAX: usize = 4096;

impl Verified {
    fn get(&self, token: &str) -> Option<Claims> {
        self.tokens.get(token).cloned()
    }

    fn keep(&mut self, token: &str, claims: &Claims, now: i64) {
        if self.tokens.len() >= VERIFIED_MAX {
            self.tokens.retain(|_, c| c.exp >= now);
            if self.tokens.len() >= VERIFIED_MAX {
                self.tokens.clear();
            }
        }
        self.tokens.insert(token.into(), claims.clone());
    }
}

impl JwtKeys {
    pub fn new(kid: &str, secret: &[u8], previous: &[(String, Vec<u8>)]) -> Self {
        JwtKeys {
            current_kid: kid.to_string(),
            current: (
                EncodingKey::from_secret(secret),
                DecodingKey::from_secret(secret),
            ),
            previous: previous
                .iter()
                .map(|(k, s)| (k.clone(), DecodingKey::from_secret(s)))
                .collect(),
            cell: None,
            verified: Arc::default(),
        }
    }

    /// The same keys for a deployment of `cell`.
    pub fn in_cell(mut self, cell: Option<String>) -> Self {
        self.cell = cell;
        self
    }

    pub fn cell(&self) -> Option<&str> {
        self.cell.as_deref()
    }

    pub fn sign(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(self.current_kid.clone());
        jsonwebtoken::encode(&header, claims, &self.current.0)
    }

    fn key_for(&self, kid: Option<&str>) -> Option<&DecodingKey> {
        match kid {
            None => Some(&self.current.1),
            Some(k) if k == self.current_kid => Some(&self.current.1),
            Some(k) => self.previous.iter().find(|(id, _)| id == k).map(|(_, d)| d),
        }
    }

    /// Verifies signature, algorithm (HS256 only; `none` and every other algorithm are
    /// refused), issuer, audience and expiry.
    pub fn verify(&self, token: &str) -> Result<Claims, Invalid> {
        let now = Utc::now().timestamp();
        let known = self.verified.lock().ok().and_then(|v| v.get(token));
        let was_known = known.is_some();
        let claims = match known {
            // As `jsonwebtoken` checks `exp`, with no leeway.
            Some(claims) if claims.exp < now => return Err(Invalid::Expired),
            Some(claims) => claims,
            None => self.check_signed(token)?,
        };
        if !claims.lifetime_is_ours(now) {
            return Err(Invalid::Malformed);
        }
        // Minted by another cell (a router's mistake, or two cells sharing a secret).
        if !crate::domain::platform::cells::serves(self.cell(), claims.cell.as_deref()) {
            return Err(Invalid::WrongAudience);
        }
        if !was_known && let Ok(mut v) = self.verified.lock() {
            v.keep(token, &claims, now);
        }
        Ok(claims)
    }

    /// The signature, algorithm, issuer, audience and expiry.
    fn check_signed(&self, token: &str) -> Result<Claims, Invalid> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            // A readable header naming an algorithm we do not accept (`none` among them)
            // is a signature problem; only an unreadable token is malformed.
            if names_an_algorithm(token) {
                Invalid::BadSignature
            } else {
                Invalid::Malformed
            }
        })?;
        if header.alg != Algorithm::HS256 {
            return Err(Invalid::BadSignature);
        }
        let key = self
            .key_for(header.kid.as_deref())
            .ok_or(Invalid::BadSignature)?;
        let mut v = Validation::new(Algorithm::HS256);
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[AUDIENCE]);
        v.leeway = 0;
        v.set_required_spec_claims(&["exp", "iss", "aud", "iat"]);
        let claims = jsonwebtoken::decode::<Claims>(token, key, &v)
            .map(|d| d.claims)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => Invalid::Expired,
                ErrorKind::InvalidAudience => Invalid::WrongAudience,
                ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => Invalid::BadSignature,
                // A token from another issuer (a consumer token) is never ours.
                ErrorKind::InvalidIssuer => Invalid::WrongAudience,
                // Readable header and claims with a damaged signature (e.g. truncated).
                _ if claims_readable(token) => Invalid::BadSignature,
                _ => Invalid::Malformed,
            })?;
        Ok(claims)
    }
}

/// `aud` as a string, or an array of them: ours if it lists ours (else its first, which the
/// audience check then refuses as `wrong_audience`).
fn one_audience<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Aud::deserialize(d)? {
        Aud::One(a) => a,
        Aud::Many(all) => all
            .iter()
            .find(|a| *a == AUDIENCE)
            .or(all.first())
            .cloned()
            .unwrap_or_default(),
    })
}

fn claims_readable(token: &str) -> bool {
    use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
    token
        .split('.')
        .nth(1)
        .and_then(|p| URL_SAFE_NO_PAD.decode(p).ok())
        .and_then(|b| serde_json::from_slice::<Claims>(&b).ok())
        .is_some()
}

fn names_an_algorithm(token: &str) -> bool {
    use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
    token
        .split('.')
        .next()
        .and_then(|h| URL_SAFE_NO_PAD.decode(h).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|h| h.get("alg").is_some_and(serde_json::Value::is_string))
}

impl Claims {
    /// Whether the token's times are those of a token this service mints: it lives at most
    /// `TTL_SECS` from its `iat` (a leaked signing secret must not mint ten-year tokens),
    /// and it was not issued, nor does it start, in the future beyond `CLOCK_SKEW_SECS`.
    pub fn lifetime_is_ours(&self, now: i64) -> bool {
        self.exp.saturating_sub(self.iat) <= TTL_SECS
            && self.iat <= now.saturating_add(CLOCK_SKEW_SECS)
            && self
                .nbf
                .is_none_or(|nbf| nbf <= now.saturating_add(CLOCK_SKEW_SECS))
    }

    pub fn expires_at(&self) -> DateTime<Utc> {
        Utc.timestamp_opt(self.exp, 0)
            .single()
            .unwrap_or_else(Utc::now)
    }

    pub fn scope(&self) -> Scope {
        match (self.brand_id, self.branch_id) {
            (Some(b), Some(br)) => Scope::Branch {
                enterprise_id: self.enterprise_id,
                brand_id: b,
                branch_id: br,
            },
            (Some(b), None) => Scope::Brand {
                enterprise_id: self.enterprise_id,
                brand_id: b,
            },
            _ => Scope::Enterprise {
                enterprise_id: self.enterprise_id,
            },
        }
    }

    pub fn principal(&self) -> Principal {
        Principal {
            kind: CredentialKind::TerminalJwt,
            key_id: Some(self.key_id),
            integration_id: self.integration_id,
            scope: self.scope(),
            is_sandbox: self.sandbox,
            expires_at: Some(self.expires_at()),
            permissions: crate::domain::credentials::Permissions::of(&[
                crate::domain::credentials::Permission::Terminal,
            ]),
            cashier_id: self.cashier_id.clone(),
            terminal_id: self.terminal_id.clone(),
            linked_merchants: vec![],
            clock: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp_in: i64) -> Claims {
        let now = Utc::now().timestamp();
        Claims {
            iss: ISSUER.into(),
            aud: AUDIENCE.into(),
            sub: "k".into(),
            iat: now,
            exp: now + exp_in,
            nbf: None,
            jti: Uuid::now_v7().to_string(),
            integration_id: Uuid::now_v7(),
            enterprise_id: Uuid::now_v7(),
            brand_id: None,
            branch_id: None,
            cashier_id: None,
            terminal_id: None,
            sandbox: true,
            key_id: Uuid::now_v7(),
            cell: None,
        }
    }

    #[test]
    fn a_signed_token_verifies_and_a_tampered_one_does_not() {
        let keys = JwtKeys::new("k1", &[1u8; 32], &[]);
        let t = keys.sign(&claims(600)).unwrap();
        assert!(keys.verify(&t).is_ok());
        let other = JwtKeys::new("k1", &[2u8; 32], &[]);
        assert_eq!(other.verify(&t), Err(Invalid::BadSignature));
        assert_eq!(keys.verify("not.a.token"), Err(Invalid::Malformed));
    }

    #[test]
    fn a_token_checked_once_is_known_by_its_text_and_its_times_are_checked_every_time() {
        let keys = JwtKeys::new("k1", &[1u8; 32], &[]);
        let token = keys.sign(&claims(600)).unwrap();
        let first = keys.verify(&token).unwrap();
        assert_eq!(keys.verify(&token).unwrap(), first, "read from memory");
        assert_eq!(keys.verified.lock().unwrap().tokens.len(), 1);

        // One character of the signature changed: another text, the whole check.
        let mut forged = token.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == 'A' { 'B' } else { 'A' });
        assert_eq!(keys.verify(&forged), Err(Invalid::BadSignature));
        assert_eq!(keys.verified.lock().unwrap().tokens.len(), 1, "not kept");

        // A known token whose time ran out is expired, as the whole check would say.
        let now = Utc::now().timestamp();
        let mut lapsed = first.clone();
        lapsed.exp = now - 1;
        keys.verified.lock().unwrap().keep(&token, &lapsed, now);
        assert_eq!(keys.verify(&token), Err(Invalid::Expired));

        // Kept for a deployment of another cell (the same keys), it is not for this one.
        let c7 = keys.clone().in_cell(Some("c7".into()));
        let other = keys.sign(&claims(600)).unwrap();
        keys.verify(&other).unwrap();
        assert_eq!(c7.verify(&other), Err(Invalid::WrongAudience));
    }

    #[test]
    fn the_known_tokens_stay_bounded() {
        let keys = JwtKeys::new("k1", &[1u8; 32], &[]);
        let now = Utc::now().timestamp();
        let c = claims(600);
        let mut v = keys.verified.lock().unwrap();
        for i in 0..=VERIFIED_MAX {
            v.keep(&format!("t{i}"), &c, now);
        }
        assert!(v.tokens.len() <= VERIFIED_MAX);
        assert!(
            v.get(&format!("t{VERIFIED_MAX}")).is_some(),
            "the newest is kept"
        );
    }

    #[test]
    fn a_token_is_good_in_the_cell_that_minted_it_only() {
        let c7 = JwtKeys::new("k1", &[1u8; 32], &[]).in_cell(Some("c7".into()));
        let mut c = claims(600);
        c.cell = c7.cell().map(str::to_string);
        let t = c7.sign(&c).unwrap();
        assert_eq!(
            crate::domain::platform::cells::cell_of_token(&t).as_deref(),
            Some("c7")
        );
        assert!(c7.verify(&t).is_ok());
        // The same secret in another cell, or in the home cell: not for them.
        let c8 = JwtKeys::new("k1", &[1u8; 32], &[]).in_cell(Some("c8".into()));
        assert_eq!(c8.verify(&t), Err(Invalid::WrongAudience));
        let home = JwtKeys::new("k1", &[1u8; 32], &[]);
        assert_eq!(home.verify(&t), Err(Invalid::WrongAudience));
        assert_eq!(
            c7.verify(&home.sign(&claims(600)).unwrap()),
            Err(Invalid::WrongAudience)
        );
    }

    #[test]
    fn rotated_secrets_keep_verifying_their_tokens() {
        let old = JwtKeys::new("k1", &[1u8; 32], &[]);
        let t = old.sign(&claims(600)).unwrap();
        let new = JwtKeys::new("k2", &[2u8; 32], &[("k1".into(), vec![1u8; 32])]);
        assert!(new.verify(&t).is_ok());
    }

    #[test]
    fn expired_and_foreign_audience_tokens_are_named() {
        let keys = JwtKeys::new("k1", &[1u8; 32], &[]);
        assert_eq!(
            keys.verify(&keys.sign(&claims(-5)).unwrap()),
            Err(Invalid::Expired)
        );
        let mut c = claims(600);
        c.aud = "consumer-app".into();
        assert_eq!(
            keys.verify(&keys.sign(&c).unwrap()),
            Err(Invalid::WrongAudience)
        );
    }

    #[test]
    fn alg_none_is_never_valid() {
        let keys = JwtKeys::new("k1", &[1u8; 32], &[]);
        use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
        let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let p = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(600)).unwrap());
        assert_eq!(
            keys.verify(&format!("{h}.{p}.")),
            Err(Invalid::BadSignature)
        );
    }

    #[test]
    fn a_token_living_longer_than_its_ttl_or_issued_in_the_future_is_malformed() {
        let keys = JwtKeys::new("k1", &[1u8; 32], &[]);
        // What a leaked secret could mint: valid for ten years.
        let ten_years = claims(10 * 365 * 24 * 3600);
        assert_eq!(
            keys.verify(&keys.sign(&ten_years).unwrap()),
            Err(Invalid::Malformed)
        );
        let mut c = claims(601);
        assert_eq!(
            keys.verify(&keys.sign(&c).unwrap()),
            Err(Invalid::Malformed)
        );
        c.exp -= 1;
        assert!(
            keys.verify(&keys.sign(&c).unwrap()).is_ok(),
            "exactly 600 s"
        );
        let mut future = claims(600);
        future.iat += 120;
        future.exp += 120;
        assert_eq!(
            keys.verify(&keys.sign(&future).unwrap()),
            Err(Invalid::Malformed)
        );
        let mut skewed = claims(600);
        skewed.iat += CLOCK_SKEW_SECS - 5;
        assert!(
            keys.verify(&keys.sign(&skewed).unwrap()).is_ok(),
            "within the skew"
        );
        let mut not_yet = claims(600);
        not_yet.nbf = Some(not_yet.iat + 300);
        assert_eq!(
            keys.verify(&keys.sign(&not_yet).unwrap()),
            Err(Invalid::Malformed)
        );
    }

    #[test]
    fn an_audience_array_is_ours_only_if_it_names_us() {
        use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
        use hmac::{Hmac, KeyInit, Mac};
        let secret = [1u8; 32];
        let keys = JwtKeys::new("k1", &secret, &[]);
        let sign_with_aud = |aud: serde_json::Value| {
            let mut body = serde_json::to_value(claims(600)).unwrap();
            body["aud"] = aud;
            let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT","kid":"k1"}"#);
            let p = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&body).unwrap());
            let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&secret).unwrap();
            mac.update(format!("{h}.{p}").as_bytes());
            let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
            format!("{h}.{p}.{sig}")
        };
        assert_eq!(
            keys.verify(&sign_with_aud(serde_json::json!(["consumer-app", "other"]))),
            Err(Invalid::WrongAudience)
        );
        assert!(
            keys.verify(&sign_with_aud(serde_json::json!([
                "consumer-app",
                AUDIENCE
            ])))
            .is_ok()
        );
    }
}
