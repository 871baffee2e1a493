//! Console sessions: the operator key is exchanged once, at `/ops/login`, for a signed,
//! short-lived cookie (`HttpOnly`, `SameSite=Strict`, path `/ops`); nothing else opens a
//! console page. No partner credential is read here at all.
//!
//! The cookie is `<operator id>.<expiry, unix seconds>.<nonce>.<mac>`, the MAC keyed by the
//! server secret, so any replica verifies it without a session table; every request also
//! checks that the operator is still active, so disabling an operator ends their
//! sessions. Each form carries a CSRF token derived from the session's nonce.
use chrono::{DateTime, Utc};
use poem::{Request, http::header};
use rand::RngCore;
use uuid::Uuid;

use crate::{
    domain::operators::Operator,
    infra::{crypto::Sealer, secret::constant_time_eq},
    state::AppState,
    store,
};

pub const COOKIE: &str = "ops_session";
/// The login form's own CSRF cookie (double submit: the form's token is its MAC).
pub const LOGIN_COOKIE: &str = "ops_login";

/// A signed-in operator, with the CSRF token their forms carry.
pub struct Session {
    pub operator: Operator,
    pub csrf: String,
}

fn nonce() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// A new session cookie value for `operator`, valid until `expires`.
pub fn mint(sealer: &Sealer, operator: Uuid, expires: DateTime<Utc>) -> String {
    let body = format!("{operator}.{}.{}", expires.timestamp(), nonce());
    let mac = sealer.mac("ops-session", body.as_bytes());
    format!("{body}.{mac}")
}

fn csrf_of(sealer: &Sealer, nonce: &str) -> String {
    sealer.mac("ops-csrf", nonce.as_bytes())
}

/// Why a request does not open the console.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Invalid,
    Expired,
    /// The database did not answer whether the operator is still active.
    Unavailable,
}

/// The cookie's operator id and nonce, if its MAC holds and it has not expired.
pub fn verify(sealer: &Sealer, value: &str, now: DateTime<Utc>) -> Result<(Uuid, String), Refusal> {
    let parts: Vec<&str> = value.split('.').collect();
    let [id, exp, nonce, mac] = parts.as_slice() else {
        return Err(Refusal::Invalid);
    };
    let body = format!("{id}.{exp}.{nonce}");
    if !sealer.verify_mac("ops-session", body.as_bytes(), mac) {
        return Err(Refusal::Invalid);
    }
    let exp: i64 = exp.parse().map_err(|_| Refusal::Invalid)?;
    if exp <= now.timestamp() {
        return Err(Refusal::Expired);
    }
    let id = Uuid::parse_str(id).map_err(|_| Refusal::Invalid)?;
    Ok((id, (*nonce).to_string()))
}

pub fn cookie_value<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// `Secure` everywhere but on a loopback host, where a developer's browser talks plain HTTP.
fn secure(req: &Request) -> &'static str {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    if matches!(name, "localhost" | "127.0.0.1" | "[::1]") {
        ""
    } else {
        "; Secure"
    }
}

/// The `Set-Cookie` value for a cookie of the console.
pub fn set_cookie(req: &Request, name: &str, value: &str, path: &str, max_age: i64) -> String {
    format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{}",
        secure(req)
    )
}

impl Session {
    /// The session the request's cookie opens, or why not.
    pub async fn of(req: &Request, st: &AppState) -> Result<Session, Refusal> {
        let value = cookie_value(req, COOKIE).ok_or(Refusal::Missing)?;
        let (id, nonce) = verify(&st.sealer, value, Utc::now())?;
        let operator = match store::operators::find_active(&st.db, id).await {
            Ok(Some(op)) => op,
            Ok(None) => return Err(Refusal::Invalid),
            Err(e) => {
                tracing::error!(error = %e, "console: reading the operator failed");
                return Err(Refusal::Unavailable);
            }
        };
        Ok(Session {
            operator: Operator {
                id: operator.id,
                name: operator.name,
            },
            csrf: csrf_of(&st.sealer, &nonce),
        })
    }

    /// Whether a form's token is this session's, compared in constant time.
    pub fn csrf_ok(&self, token: Option<&str>) -> bool {
        token.is_some_and(|t| constant_time_eq(t.as_bytes(), self.csrf.as_bytes()))
    }
}

/// The login form's token for its cookie nonce.
pub fn login_csrf(sealer: &Sealer, nonce: &str) -> String {
    sealer.mac("ops-login", nonce.as_bytes())
}

pub fn new_login_nonce() -> String {
    nonce()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        Sealer::new(b"a test secret of enough length.")
    }

    #[test]
    fn a_session_holds_until_it_expires_and_only_with_its_mac() {
        let s = sealer();
        let op = Uuid::now_v7();
        let now = Utc::now();
        let v = mint(&s, op, now + chrono::Duration::minutes(30));
        assert_eq!(verify(&s, &v, now).unwrap().0, op);
        assert_eq!(
            verify(&s, &v, now + chrono::Duration::minutes(31)),
            Err(Refusal::Expired)
        );
        let forged = v.replacen(&op.to_string(), &Uuid::now_v7().to_string(), 1);
        assert_eq!(verify(&s, &forged, now), Err(Refusal::Invalid));
        let other_server = Sealer::new(b"another secret of enough length");
        assert_eq!(verify(&other_server, &v, now), Err(Refusal::Invalid));
        assert_eq!(verify(&s, "garbage", now), Err(Refusal::Invalid));
    }
}
