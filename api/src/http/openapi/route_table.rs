//! The operations of the published document, looked up by request path: which methods a
//! path takes (`Allow` on a 405 and on `OPTIONS`) and which credentials each method wants
//! (the `details` of a 401, and whether a browser may call it). Built from the document,
//! so it cannot disagree with what the router serves.
use std::collections::BTreeMap;

use crate::http::openapi::document::OperationInfo;

/// The base path every document path sits under (DECISIONS.md).
pub const BASE: &str = "/v1";

#[derive(Clone, Debug)]
pub struct Method {
    pub method: String,
    /// Security schemes any one of which admits a caller; empty: no credential.
    pub schemes: Vec<String>,
}

#[derive(Debug)]
struct Template {
    /// The full path as the document writes it (`/v1/payments/{payment_id}`).
    path: String,
    /// `None` where the template has a `{parameter}`.
    segments: Vec<Option<String>>,
    methods: Vec<Method>,
}

#[derive(Debug, Default)]
pub struct RouteTable {
    templates: Vec<Template>,
}

impl RouteTable {
    /// The document's operations (paths under `/v1`) and the plain `GET` pages served
    /// beside them (full paths).
    pub fn new(ops: &[OperationInfo], pages: &[&str]) -> Self {
        let mut by_path: BTreeMap<String, Vec<Method>> = BTreeMap::new();
        for op in ops {
            by_path
                .entry(format!("{BASE}{}", op.path))
                .or_default()
                .push(Method {
                    method: op.method.clone(),
                    schemes: op.schemes.clone(),
                });
        }
        for page in pages {
            by_path.entry(page.to_string()).or_default().push(Method {
                method: "GET".into(),
                schemes: vec![],
            });
        }
        let templates = by_path
            .into_iter()
            .map(|(path, methods)| Template {
                segments: split(&path)
                    .map(|s| (!s.starts_with('{')).then(|| s.to_string()))
                    .collect(),
                path,
                methods,
            })
            .collect();
        RouteTable { templates }
    }

    /// The methods of the template a request path (with its `/v1` prefix) routes to; the
    /// router prefers a literal segment to a parameter, and so does this.
    pub fn methods(&self, full_path: &str) -> Option<&[Method]> {
        self.find(full_path).map(|t| t.methods.as_slice())
    }

    /// The template a request path routes to, as the document writes it: the `route` label
    /// of request metrics (one series per operation, never per id).
    pub fn template(&self, full_path: &str) -> Option<&str> {
        self.find(full_path).map(|t| t.path.as_str())
    }

    fn find(&self, full_path: &str) -> Option<&Template> {
        let parts: Vec<&str> = split(full_path).collect();
        self.templates
            .iter()
            .filter(|t| {
                t.segments.len() == parts.len()
                    && t.segments
                        .iter()
                        .zip(&parts)
                        .all(|(s, p)| s.as_deref().is_none_or(|lit| lit == *p))
            })
            // Literal segments outrank parameters, leftmost first.
            .max_by_key(|t| {
                t.segments
                    .iter()
                    .map(|s| s.is_some())
                    .collect::<Vec<bool>>()
            })
    }

    /// The `Allow` value for a path: its methods and OPTIONS (HEAD where GET is served).
    pub fn allow(&self, full_path: &str) -> Option<String> {
        let methods = self.methods(full_path)?;
        let mut names: Vec<&str> = methods.iter().map(|m| m.method.as_str()).collect();
        if names.contains(&"GET") {
            names.push("HEAD");
        }
        names.push("OPTIONS");
        names.sort_unstable();
        names.dedup();
        Some(names.join(", "))
    }

    /// The schemes of one method of a path.
    pub fn schemes(&self, full_path: &str, method: &str) -> Option<&[String]> {
        self.methods(full_path)?
            .iter()
            .find(|m| m.method.eq_ignore_ascii_case(method))
            .map(|m| m.schemes.as_slice())
    }
}

fn split(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(method: &str, path: &str, schemes: &[&str]) -> OperationInfo {
        OperationInfo {
            operation_id: format!("{method}{path}"),
            method: method.into(),
            path: path.into(),
            domain: String::new(),
            stability: "ga".into(),
            schemes: schemes.iter().map(|s| s.to_string()).collect(),
            permission: None,
        }
    }

    fn table() -> RouteTable {
        RouteTable::new(
            &[
                op("GET", "/payments/{payment_id}", &["ApiKeyAuth"]),
                op("POST", "/payments", &["PosTerminalJWT", "ApiKeyAuth"]),
                op("GET", "/payments/search", &["ApiKeyAuth"]),
                op("POST", "/payments/{payment_id}/refund", &["ApiKeyAuth"]),
                op("GET", "/health", &[]),
            ],
            &["/v1/openapi.json"],
        )
    }

    #[test]
    fn a_path_is_labelled_by_the_template_it_routes_to() {
        let t = table();
        assert_eq!(
            t.template("/v1/payments/8c4b0b0e"),
            Some("/v1/payments/{payment_id}")
        );
        assert_eq!(
            t.template("/v1/payments/search"),
            Some("/v1/payments/search")
        );
        assert_eq!(
            t.template("/v1/payments/x/refund"),
            Some("/v1/payments/{payment_id}/refund")
        );
        assert_eq!(t.template("/v1/nothing/here"), None);
    }

    #[test]
    fn allow_lists_the_methods_of_the_template_the_path_routes_to() {
        let t = table();
        assert_eq!(t.allow("/v1/payments").unwrap(), "OPTIONS, POST");
        assert_eq!(
            t.allow("/v1/payments/8c4b0b0e").unwrap(),
            "GET, HEAD, OPTIONS"
        );
        assert_eq!(t.allow("/v1/payments/x/refund").unwrap(), "OPTIONS, POST");
        assert!(t.allow("/v1/nothing").is_none());
        assert!(t.allow("/payments").is_none(), "outside the base path");
    }

    #[test]
    fn a_literal_segment_outranks_a_parameter() {
        let t = table();
        assert_eq!(
            t.schemes("/v1/payments/search", "GET").unwrap(),
            ["ApiKeyAuth".to_string()]
        );
        assert_eq!(
            t.schemes("/v1/payments", "post").unwrap(),
            ["PosTerminalJWT".to_string(), "ApiKeyAuth".to_string()]
        );
        assert!(t.schemes("/v1/health", "GET").unwrap().is_empty());
        assert_eq!(t.allow("/v1/openapi.json").unwrap(), "GET, HEAD, OPTIONS");
    }
}
