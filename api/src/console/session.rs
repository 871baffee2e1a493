//! Console sessions: the operator key is exchanged once, at `/ops/login`, for a signed,
//! short-lived cookie (`HttpOnly`, `SameSite=Strict`, path `/ops`); nothing else opens a
//! console page. No partner credential is read here at all.
//!
//! The cookie is `<operator id>.<expiry, unix seconds>.<session id>.<mac>`, the MAC keyed
//! by the server secret, so a forged or altered cookie is refused before any look-up. The
//! session itself lives on the server (`domain::operators::sessions`): every request
//! checks that it is neither signed out nor expired and that its operator is still active,
//! so signing out, and disabling or enabling the operator, end it everywhere at once. Each
//! form carries a CSRF token derived from the session's id.
use chrono::{DateTime, Utc};
use poem::{Request, http::header};
use rand::RngCore;
use uuid::Uuid;

use crate::{
    domain::operators::{Operator, sessions},
    error::ApiError,
    infra::{crypto::Sealer, secret::constant_time_eq},
    state::AppState,
};

pub const COOKIE: &str = "ops_session";
/// The login form's own CSRF cookie (double submit: the form's token is its MAC).
pub const LOGIN_COOKIE: &str = "ops_login";

/// A signed-in operator, with the CSRF token their forms carry.
pub struct Session {
    pub id: Uuid,
    pub operator: Operator,
    pub csrf: String,
}

fn nonce() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// The cookie value of session `session` of `operator`, valid until `expires`.
pub fn mint(sealer: &Sealer, operator: Uuid, session: Uuid, expires: DateTime<Utc>) -> String {
    let body = format!("{operator}.{}.{session}", expires.timestamp());
    let mac = sealer.mac("ops-session", body.as_bytes());
    format!("{body}.{mac}")
}

/// Opens a session for `op` (audited as a sign-in from `client`) and returns its cookie
/// value.
pub async fn open(st: &AppState, op: &Operator, client: &str) -> Result<String, ApiError> {
    let ttl = chrono::Duration::seconds(i64::try_from(st.config.ops_session_secs).unwrap_or(1800));
    let opened = sessions::open(&st.db, op, ttl, client).await?;
    crate::infra::current_request::set_caller(op.id);
    Ok(mint(&st.sealer, op.id, opened.id, opened.expires_at))
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

/// The cookie's operator and session ids, if its MAC holds and it has not expired.
pub fn verify(sealer: &Sealer, value: &str, now: DateTime<Utc>) -> Result<(Uuid, Uuid), Refusal> {
    let parts: Vec<&str> = value.split('.').collect();
    let [id, exp, session, mac] = parts.as_slice() else {
        return Err(Refusal::Invalid);
    };
    let body = format!("{id}.{exp}.{session}");
    if !sealer.verify_mac("ops-session", body.as_bytes(), mac) {
        return Err(Refusal::Invalid);
    }
    let exp: i64 = exp.parse().map_err(|_| Refusal::Invalid)?;
    if exp <= now.timestamp() {
        return Err(Refusal::Expired);
    }
    let id = Uuid::parse_str(id).map_err(|_| Refusal::Invalid)?;
    let session = Uuid::parse_str(session).map_err(|_| Refusal::Invalid)?;
    Ok((id, session))
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
        let (id, session) = verify(&st.sealer, value, Utc::now())?;
        let operator = match sessions::live(&st.db, session, id).await {
            Ok(Some(op)) => op,
            Ok(None) => return Err(Refusal::Invalid),
            Err(e) => {
                tracing::error!(error = %e, "console: reading the session failed");
                return Err(Refusal::Unavailable);
            }
        };
        crate::infra::current_request::set_caller(operator.id);
        Ok(Session {
            id: session,
            operator,
            csrf: csrf_of(&st.sealer, &session.to_string()),
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
        let session = Uuid::now_v7();
        let now = Utc::now();
        let v = mint(&s, op, session, now + chrono::Duration::minutes(30));
        assert_eq!(verify(&s, &v, now).unwrap(), (op, session));
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
