//! Where a webhook may be sent: the guard that keeps the service from being turned
//! against its own network (SSRF).
use std::net::IpAddr;

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

/// Where the service may post. HTTPS, except plain HTTP for sandbox integrations; a host
/// that resolves to a private, loopback, link-local or metadata address is refused unless
/// the deployment allows private targets (tests on 127.0.0.1), so the service cannot be
/// turned against its own network.
pub async fn check_url(raw: &str, sandbox: bool, allow_private: bool) -> Result<(), ApiError> {
    let bad = |m: &str| ApiError::field("/url", "invalid_url", m);
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
    if addrs.is_empty() {
        return Err(bad("the host does not resolve"));
    }
    if addrs.into_iter().any(private) {
        return Err(bad(
            "resolves to a private, loopback, link-local or metadata address",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
