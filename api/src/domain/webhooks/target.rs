//! Where a webhook may be sent: the guard that keeps the service from being turned
//! against its own network (SSRF).
//!
//! The guard runs twice: when an endpoint is registered (and before each delivery), to give
//! a clear error, and inside the connection itself (`PinnedResolver`): the addresses it
//! approves are the only ones the delivery connects to. A host whose DNS answer changes
//! between the check and the connect (DNS rebinding) reaches nothing private.
use std::{
    future::Future,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::Arc,
};

use crate::error::ApiError;

fn private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.octets()[0] == 0
                // Carrier-grade NAT 100.64.0.0/10.
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
                // Benchmarking 198.18.0.0/15, reserved 240.0.0.0/4.
                || (v4.octets()[0] == 198 && (v4.octets()[1] & 0xfe) == 18)
                || v4.octets()[0] >= 240
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                // fc00::/7 unique local, fe80::/10 link-local.
                || (v6.segments()[0] & 0xfe00) == 0xfc00
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                // NAT64 64:ff9b::/96 and 6to4 2002::/16 reach IPv4 hosts; so do
                // IPv4-mapped and IPv4-compatible addresses. Refuse them all.
                || (v6.segments()[0] == 0x64 && v6.segments()[1] == 0xff9b)
                || v6.segments()[0] == 0x2002
                || v6.to_ipv4().is_some()
        }
    }
}

/// The published form of an endpoint's address (`format: uri`): `http` or `https` in any
/// case, `://`, an authority with neither credentials (`@`) nor white space, then an
/// optional path, query or fragment; no white space or control character anywhere.
pub const URL_PATTERN: &str =
    r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1F\x7F-\x9F/?#@\\]+(?:[/?#][^\s\x00-\x1F\x7F-\x9F]*)?$";

/// Whether `raw` has the form `URL_PATTERN` publishes (what a schema can say). Where it
/// points is `check_url`'s to decide.
pub fn well_formed(raw: &str) -> bool {
    let rest = [("https://", 8), ("http://", 7)]
        .into_iter()
        .find_map(|(scheme, n)| {
            raw.get(..n)
                .filter(|s| s.eq_ignore_ascii_case(scheme))
                .map(|_| &raw[n..])
        });
    let Some(rest) = rest else {
        return false;
    };
    let unprintable = |c: char| c.is_whitespace() || c.is_control();
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    !authority.is_empty()
        && !authority
            .chars()
            .any(|c| unprintable(c) || c == '@' || c == '\\')
        && !tail.chars().any(unprintable)
}

/// Where the service may post. HTTPS, except plain HTTP for sandbox integrations; a host
/// that resolves to a private, loopback, link-local or metadata address is refused unless
/// the deployment allows private targets (tests on 127.0.0.1), so the service cannot be
/// turned against its own network.
pub async fn check_url(raw: &str, sandbox: bool, allow_private: bool) -> Result<(), ApiError> {
    let bad = |m: &str| ApiError::field("/url", "invalid_url", m);
    if !well_formed(raw) {
        return Err(bad(
            "must be an absolute http(s) URL with a host, without credentials or spaces",
        ));
    }
    let url = reqwest::Url::parse(raw).map_err(|_| bad("must be an absolute URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if sandbox || allow_private => {}
        _ => return Err(bad("must use https (http only for sandbox integrations)")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not carry credentials"));
    }
    let host = url.host_str().ok_or_else(|| bad("must name a host"))?;
    if allow_private {
        return Ok(());
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs: Vec<IpAddr> = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        tokio::net::lookup_host((host.trim_matches(['[', ']']), port)),
    )
    .await
    .map_err(|_| bad("the host did not resolve in time"))?
    .map_err(|_| bad("the host does not resolve"))?
    .map(|a| a.ip())
    .collect();
    approve(&addrs).map_err(bad)
}

/// The rule both checks apply to a host's addresses: at least one, and none private.
fn approve(addrs: &[IpAddr]) -> Result<(), &'static str> {
    if addrs.is_empty() {
        return Err("the host does not resolve");
    }
    if addrs.iter().copied().any(private) {
        return Err("resolves to a private, loopback, link-local or metadata address");
    }
    Ok(())
}

type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The DNS resolver of the webhook client: it resolves a host for the connection and hands
/// the connector only addresses the guard approved, so what was checked is what is reached.
#[derive(Clone)]
pub struct PinnedResolver {
    allow_private: bool,
    lookup: Lookup,
}

impl PinnedResolver {
    /// Resolves with the system's resolver.
    pub fn system(allow_private: bool) -> Self {
        Self::with_lookup(allow_private, |host| async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }

    /// Resolves with `lookup` (tests give it a DNS that changes its answer).
    pub fn with_lookup<F, Fut>(allow_private: bool, lookup: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'static,
    {
        PinnedResolver {
            allow_private,
            lookup: Arc::new(move |host| Box::pin(lookup(host))),
        }
    }
}

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let (allow_private, lookup) = (self.allow_private, self.lookup.clone());
        Box::pin(async move {
            let addrs = lookup(host.clone()).await?;
            if !allow_private {
                approve(&addrs).map_err(|why| format!("webhook host {host} {why}"))?;
            }
            // Port 0: the connector puts the URL's port on each address.
            let pinned: Vec<SocketAddr> = addrs.into_iter().map(|ip| (ip, 0).into()).collect();
            Ok(Box::new(pinned.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A DNS that answers a public address first and the loopback address after: the
    /// rebinding attack the connection-time check stops.
    fn rebinding(calls: Arc<AtomicUsize>) -> PinnedResolver {
        PinnedResolver::with_lookup(false, move |_host| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok(vec![if n == 0 {
                    "93.184.216.34".parse().unwrap()
                } else {
                    "127.0.0.1".parse().unwrap()
                }])
            }
        })
    }

    /// A local server counting the requests that reach it.
    async fn counting_server() -> (u16, Arc<AtomicUsize>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                h.fetch_add(1, Ordering::SeqCst);
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        (port, hits)
    }

    #[tokio::test]
    async fn a_host_that_rebinds_to_a_private_address_after_the_check_is_never_reached() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (port, hits) = counting_server().await;
        let calls = Arc::new(AtomicUsize::new(0));
        let resolver = rebinding(calls.clone());
        // The registration-time check saw a public address ...
        let first = reqwest::dns::Resolve::resolve(&resolver, "hooks.example".parse().unwrap())
            .await
            .expect("a public answer is approved");
        assert_eq!(first.count(), 1);
        // ... and the delivery's connection gets the rebound, private one: refused.
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(resolver))
            .no_proxy()
            .build()
            .unwrap();
        let sent = client
            .post(format!("http://hooks.example:{port}/hooks"))
            .body("{}")
            .send()
            .await;
        assert!(sent.is_err(), "the rebound address was connected to");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "the connection resolved anew"
        );
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "nothing reached the private address"
        );

        // The same request with a resolver that does not check reaches it: the test would
        // see an unguarded client.
        let open =
            PinnedResolver::with_lookup(true, |_| async { Ok(vec!["127.0.0.1".parse().unwrap()]) });
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(open))
            .no_proxy()
            .build()
            .unwrap();
        let sent = client
            .post(format!("http://hooks.example:{port}/hooks"))
            .send()
            .await;
        assert!(sent.is_ok(), "{sent:?}");
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn private_loopback_link_local_and_metadata_addresses_are_refused() {
        for ip in [
            "10.0.0.1",
            "172.16.3.4",
            "192.168.1.1",
            "127.0.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(private(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(!private(ip.parse().unwrap()), "{ip}");
        }
    }
}
