//! Idempotency is one unit (issue 46): the Idempotency-Key header is read in one place (the
//! early replay layer parses it into the request's extensions, `idempotency::Presented`),
//! every Redis key format of idempotency lives in `infra::kv::idempotency_keys`, and the
//! authenticated caller (`Principal`) carries nothing of it.
use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use super::reader::is_test_only;

/// Every string literal of the sources outside test code, macro arguments included, with
/// the module it is in.
pub fn literals(sources: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (module, text) in sources {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module}: {e}"));
        Literals {
            module,
            out: &mut out,
        }
        .visit_file(&file);
    }
    out
}

struct Literals<'a> {
    module: &'a str,
    out: &'a mut Vec<(String, String)>,
}

impl Literals<'_> {
    fn tokens(&mut self, tokens: TokenStream) {
        for t in tokens {
            match t {
                TokenTree::Literal(l) => {
                    if let Ok(s) = syn::parse_str::<syn::LitStr>(&l.to_string()) {
                        self.out.push((self.module.to_string(), s.value()));
                    }
                }
                TokenTree::Group(g) => self.tokens(g.stream()),
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Literals<'_> {
    fn visit_lit_str(&mut self, l: &'ast syn::LitStr) {
        self.out.push((self.module.to_string(), l.value()));
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_only(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    // `#[oai(name = "Idempotency-Key")]` declares the parameter; it reads nothing.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}

/// Modules that name the header by its name, in any case: where it is read from requests.
pub fn header_readers(sources: &BTreeMap<String, String>) -> BTreeSet<String> {
    literals(sources)
        .into_iter()
        .filter(|(_, s)| s.eq_ignore_ascii_case("idempotency-key"))
        .map(|(m, _)| m)
        .collect()
}

/// Modules that spell a Redis key of idempotency (`idem:` ...).
pub fn key_formatters(sources: &BTreeMap<String, String>) -> BTreeSet<String> {
    literals(sources)
        .into_iter()
        .filter(|(_, s)| s.starts_with("idem:"))
        .map(|(m, _)| m)
        .collect()
}

/// The fields of `struct Principal` in `module`'s source.
pub fn principal_fields(source: &str) -> BTreeSet<String> {
    let file = syn::parse_file(source).unwrap();
    file.items
        .iter()
        .find_map(|i| match i {
            syn::Item::Struct(s) if s.ident == "Principal" => Some(
                s.fields
                    .iter()
                    .filter_map(|f| f.ident.as_ref().map(|i| i.to_string()))
                    .collect(),
            ),
            _ => None,
        })
        .expect("struct Principal")
}

#[cfg(test)]
mod fixtures {
    use super::*;

    fn one(module: &str, text: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(module.to_string(), text.to_string())])
    }

    #[test]
    fn a_header_read_anywhere_else_is_found_in_code_and_in_macros() {
        let read = one(
            "http::payments",
            r#"fn f(r: &R) { let k = r.headers().get("Idempotency-Key"); }"#,
        );
        assert_eq!(
            header_readers(&read),
            BTreeSet::from(["http::payments".into()])
        );
        let in_macro = one(
            "domain::x",
            r#"fn f() { tracing::info!(key = %h.get("idempotency-key").unwrap()); }"#,
        );
        assert_eq!(header_readers(&in_macro).len(), 1);
        let declared = one(
            "http::payments",
            r#"impl A { async fn f(&self, #[oai(name = "Idempotency-Key")] key: Idempotent<'_>) {} }"#,
        );
        assert!(header_readers(&declared).is_empty());
        let tested = one(
            "http::payments",
            r#"#[cfg(test)] mod tests { fn t() { h.get("idempotency-key"); } }"#,
        );
        assert!(header_readers(&tested).is_empty());
    }

    #[test]
    fn a_key_format_in_a_format_call_is_found() {
        let f = one(
            "domain::credentials::authenticate",
            r#"fn k(fp: &str) -> String { format!("idem:resp:cred:{fp}") }"#,
        );
        assert_eq!(key_formatters(&f).len(), 1);
    }
}
