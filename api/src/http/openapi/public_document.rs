//! The public, credential-free copies of the document (`/v1/openapi.json`) and the docs
//! page (`/v1/docs`): fixed for the life of the process, so each is served with a strong
//! `ETag` (a conditional `If-None-Match` is answered `304`) and gzip-compressed when the
//! client accepts it. The docs page inlines its viewer's script and the whole document
//! (several MiB): compressed once, on its first request, not on every request.
use std::sync::OnceLock;

use bytes::Bytes;
use poem::{
    Request, Response,
    http::{HeaderValue, StatusCode, header},
};
use sha2::{Digest, Sha256};

pub struct PublicDocument {
    /// Shared, not copied, into each response.
    body: Bytes,
    content_type: &'static str,
    /// `"<sha-256 prefix>"` of the body; the gzip representation's tag ends in `-gz"`.
    etag: String,
    gzip: OnceLock<Bytes>,
}

impl PublicDocument {
    pub fn new(body: impl Into<Vec<u8>>, content_type: &'static str) -> Self {
        let body = Bytes::from(body.into());
        let digest = hex::encode(Sha256::digest(&body));
        PublicDocument {
            etag: format!("\"{}\"", &digest[..32]),
            body,
            content_type,
            gzip: OnceLock::new(),
        }
    }

    fn gzip_etag(&self) -> String {
        format!("{}-gz\"", self.etag.trim_end_matches('"'))
    }

    fn gzipped(&self) -> &Bytes {
        self.gzip.get_or_init(|| {
            use std::io::Write;
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            // Writing into a Vec cannot fail.
            let _ = enc.write_all(&self.body);
            Bytes::from(enc.finish().unwrap_or_default())
        })
    }

    pub fn respond(&self, req: &Request) -> Response {
        let gzip = accepts_gzip(req);
        let etag = if gzip {
            self.gzip_etag()
        } else {
            self.etag.clone()
        };
        let b = Response::builder()
            .header(header::ETAG, etag.as_str())
            // Kept by any cache, but checked with the server (a 304) before each use: a
            // deploy changes the document without changing its URL.
            .header(header::CACHE_CONTROL, "no-cache")
            .header(header::VARY, "Accept-Encoding");
        if self.not_modified(req) {
            return b.status(StatusCode::NOT_MODIFIED).finish();
        }
        let b = b.content_type(self.content_type);
        if gzip {
            b.header(header::CONTENT_ENCODING, "gzip")
                .body(self.gzipped().clone())
        } else {
            b.body(self.body.clone())
        }
    }

    /// `If-None-Match` lists either representation's tag (weak or strong), or is `*`.
    fn not_modified(&self, req: &Request) -> bool {
        let gz = self.gzip_etag();
        req.headers()
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == "*" || t == self.etag || t == gz)
    }
}

/// `Accept-Encoding` names gzip (or `*`) without `q=0`.
fn accepts_gzip(req: &Request) -> bool {
    req.headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v: &HeaderValue| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder();
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.finish()
    }

    #[test]
    fn a_matching_if_none_match_is_answered_304_without_a_body() {
        let p = PublicDocument::new("{\"openapi\":\"3.1.0\"}", "application/json");
        let first = p.respond(&req(&[]));
        assert_eq!(first.status(), StatusCode::OK);
        let tag = first.headers()[header::ETAG].to_str().unwrap().to_string();
        let again = p.respond(&req(&[("if-none-match", &tag)]));
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::ETAG].to_str().unwrap(), tag);
        let weak = p.respond(&req(&[("if-none-match", &format!("\"x\", W/{tag}"))]));
        assert_eq!(weak.status(), StatusCode::NOT_MODIFIED);
        let other = p.respond(&req(&[("if-none-match", "\"0000\"")]));
        assert_eq!(other.status(), StatusCode::OK);
    }

    #[test]
    fn gzip_is_served_when_accepted_and_unpacks_to_the_same_bytes() {
        use std::io::Read;
        let body = "{\"paths\":{}}".repeat(1000);
        let p = PublicDocument::new(body.clone(), "application/json");
        let plain = p.respond(&req(&[("accept-encoding", "gzip;q=0, br")]));
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        let resp = p.respond(&req(&[("accept-encoding", "br, gzip")]));
        assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
        let tag = resp.headers()[header::ETAG].to_str().unwrap().to_string();
        assert_ne!(tag, plain.headers()[header::ETAG].to_str().unwrap());
        let packed = p.gzipped().to_vec();
        assert!(packed.len() < body.len() / 10);
        let mut out = String::new();
        flate2::read::GzDecoder::new(&packed[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, body);
        let again = p.respond(&req(&[
            ("accept-encoding", "gzip"),
            ("if-none-match", &tag),
        ]));
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    }
}
