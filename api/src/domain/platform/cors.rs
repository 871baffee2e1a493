//! Which browser origins may call an integration's terminal-JWT operations (CORS).
//!
//! The wallet app and web POS call `POST /qr/mint` and the other terminal operations with a
//! short-lived terminal JWT; a platform API key never belongs in a browser, so no x-api-key
//! or operator operation is ever offered to one. Nothing is allowed by default: an operator
//! lists each origin of each integration. A preflight carries no credential, so it is
//! answered for an origin that some integration lists; the request itself is served to a
//! browser only when the caller's own integration lists its origin.
use std::collections::HashMap;

use crate::store::Db;
use uuid::Uuid;

use crate::{error::ApiError, store};

pub const MAX_ORIGINS: usize = 20;

/// How long a replica keeps the lists before reading them again: a change an operator makes
/// on another replica applies here within this time.
pub const CORS_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// An origin as a browser sends it: `https://host[:port]`, lower case, nothing after the
/// authority. Plain `http` only for a loopback host (a developer's machine).
/// The origins `normalize_origin` accepts, as a JSON Schema pattern (letters in either
/// case; the port 1 to 65535 without a leading zero), with `MAX_ORIGIN_LEN`.
pub const ORIGIN_PATTERN: &str = concat!(
    "^(?:[Hh][Tt][Tt][Pp][Ss]://(?:[A-Za-z0-9-]+(?:[.][A-Za-z0-9-]+)*|\\[::1\\])",
    "|[Hh][Tt][Tt][Pp]://(?:[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]|127[.]0[.]0[.]1|\\[::1\\]))",
    "(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?$"
);
pub const MAX_ORIGIN_LEN: usize = 260;

pub fn normalize_origin(raw: &str) -> Result<String, &'static str> {
    if raw.len() > MAX_ORIGIN_LEN {
        return Err("an origin is at most 260 characters");
    }
    let lower = raw.to_ascii_lowercase();
    let (scheme, rest) = lower
        .split_once("://")
        .ok_or("an origin is scheme://host[:port]")?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', '*']) || rest.len() > 253 {
        return Err(
            "an origin is scheme://host[:port], with no path, query, credentials or wildcard",
        );
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !rest.starts_with('[') || h.ends_with(']') => (h, Some(p)),
        _ => (rest, None),
    };
    if let Some(p) = port
        && (p.starts_with('0')
            || !p.bytes().all(|b| b.is_ascii_digit())
            || !matches!(p.parse::<u32>(), Ok(1..=65535)))
    {
        return Err("the port must be 1 to 65535");
    }
    let ipv6_loopback = host == "[::1]";
    let host_ok = ipv6_loopback
        || (!host.is_empty()
            && host.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }));
    if !host_ok {
        return Err("the host must be a DNS name or an IPv4 address");
    }
    let loopback = ipv6_loopback || host == "localhost" || host == "127.0.0.1";
    match scheme {
        "https" => {}
        "http" if loopback => {}
        "http" => return Err("plain http is allowed for localhost only; use https"),
        _ => return Err("the scheme must be https"),
    }
    Ok(lower)
}

/// Every integration's allowed origins, as one replica holds them (see `AppState::cors`).
#[derive(Debug, Default)]
pub struct CorsOrigins {
    by_integration: HashMap<Uuid, Vec<String>>,
}

impl CorsOrigins {
    pub async fn load(db: &Db) -> Result<Self, ApiError> {
        Ok(CorsOrigins {
            by_integration: store::tenancy::cors_origins(db)
                .await?
                .into_iter()
                .collect(),
        })
    }

    /// The caller's integration lists this origin.
    pub fn allows(&self, integration: Uuid, origin: &str) -> bool {
        self.by_integration
            .get(&integration)
            .is_some_and(|l| l.iter().any(|o| o == origin))
    }

    /// Some integration lists this origin (a preflight names no caller).
    pub fn listed(&self, origin: &str) -> bool {
        self.by_integration
            .values()
            .any(|l| l.iter().any(|o| o == origin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_https_host_and_port_only() {
        assert_eq!(
            normalize_origin("https://Wallet.Example.com").unwrap(),
            "https://wallet.example.com"
        );
        assert_eq!(
            normalize_origin("https://pos.example.com:8443").unwrap(),
            "https://pos.example.com:8443"
        );
        assert_eq!(
            normalize_origin("http://localhost:5173").unwrap(),
            "http://localhost:5173"
        );
        assert!(normalize_origin("http://127.0.0.1:3000").is_ok());
        assert!(normalize_origin("http://[::1]:3000").is_ok());
        for bad in [
            "http://wallet.example.com",
            "https://wallet.example.com/",
            "https://wallet.example.com/app",
            "https://*.example.com",
            "https://user@example.com",
            "wallet.example.com",
            "ftp://example.com",
            "https://example.com:0",
            "https://example.com:99999",
            "https://exa mple.com",
            "https://",
            "null",
        ] {
            assert!(normalize_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_origin_is_allowed_only_for_the_integration_that_lists_it() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let c = CorsOrigins {
            by_integration: HashMap::from([(a, vec!["https://wallet.example.com".to_string()])]),
        };
        assert!(c.allows(a, "https://wallet.example.com"));
        assert!(!c.allows(b, "https://wallet.example.com"));
        assert!(c.listed("https://wallet.example.com"));
        assert!(!c.listed("https://evil.example.com"));
    }
}
