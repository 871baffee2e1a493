//! States are closed sets (issue 46): every status or state column of `entities` is an enum
//! (`entities::states!`, a sea-orm `DeriveActiveEnum` stored as the string it always was),
//! and no code of `api/src` compares a state with a string literal (`x.status == "voided"`,
//! `match x.state.as_str() { "LOCKED" => .. }`, `matches!(g.state.as_str(), "RELEASED")`).
//! A filter a partner sends (`?status=`) is parsed into its enum where it is read.
use std::{collections::BTreeMap, path::Path};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use super::reader::{is_test_only, sources};

fn is_state_name(name: &str) -> bool {
    let name = name.trim_start_matches("r#");
    ["state", "status"]
        .iter()
        .any(|s| name == *s || name.ends_with(&format!("_{s}")))
}

/// `Model` fields of `entities` named like a state whose type is a string.
pub fn string_state_columns(entities: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (module, text) in entities {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("entities::{module}: {e}"));
        for item in &file.items {
            let syn::Item::Struct(s) = item else { continue };
            if s.ident != "Model" {
                continue;
            }
            for f in &s.fields {
                let Some(name) = &f.ident else { continue };
                let ty = quote::ToTokens::to_token_stream(&f.ty).to_string();
                if is_state_name(&name.to_string()) && ty.contains("String") {
                    out.push(format!("entities::{module}::Model::{name}: {ty}"));
                }
            }
        }
    }
    out
}

/// Whether an expression names a state (`x.status`, `state`, `s.state.as_str()`).
fn names_state(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Ident(i) => is_state_name(&i.to_string()),
        TokenTree::Group(g) => names_state(g.stream()),
        _ => false,
    })
}

fn has_string_literal(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Literal(l) => l.to_string().starts_with('"'),
        TokenTree::Group(g) => has_string_literal(g.stream()),
        _ => false,
    })
}

struct Comparisons<'a> {
    module: &'a str,
    out: Vec<String>,
}

impl Comparisons<'_> {
    fn found(&mut self, what: &str, line: usize) {
        self.out.push(format!("{}:{line}: {what}", self.module));
    }
}

fn tokens(e: &impl quote::ToTokens) -> TokenStream {
    e.to_token_stream()
}

impl<'ast> Visit<'ast> for Comparisons<'_> {
    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        if matches!(b.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_)) {
            let (l, r) = (tokens(&b.left), tokens(&b.right));
            let state_vs_text = (names_state(l.clone()) && has_string_literal(r.clone()))
                || (names_state(r) && has_string_literal(l));
            if state_vs_text {
                let line = syn::spanned::Spanned::span(&b.op).start().line;
                self.found("a state compared with ==/!= to a string", line);
            }
        }
        syn::visit::visit_expr_binary(self, b);
    }

    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        if names_state(tokens(&m.expr)) && m.arms.iter().any(|a| has_string_literal(tokens(&a.pat)))
        {
            let line = m.match_token.span.start().line;
            self.found("a state matched against strings", line);
        }
        syn::visit::visit_expr_match(self, m);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if m.path.is_ident("matches") {
            let all: Vec<TokenTree> = m.tokens.clone().into_iter().collect();
            let comma = all
                .iter()
                .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','));
            if let Some(at) = comma {
                let scrutinee: TokenStream = all[..at].iter().cloned().collect();
                let patterns: TokenStream = all[at + 1..].iter().cloned().collect();
                if names_state(scrutinee) && has_string_literal(patterns) {
                    let line = m.path.segments[0].ident.span().start().line;
                    self.found("a state tested with matches! against strings", line);
                }
            }
        }
        syn::visit::visit_macro(self, m);
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
}

/// Every comparison of a state with a string literal outside test code.
pub fn string_state_comparisons(api: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (module, text) in api {
        if module.ends_with("::tests") || module == "tests" {
            continue;
        }
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module}: {e}"));
        let mut v = Comparisons {
            module,
            out: Vec::new(),
        };
        for item in &file.items {
            let attrs: &[syn::Attribute] = match item {
                syn::Item::Mod(m) => &m.attrs,
                syn::Item::Fn(f) => &f.attrs,
                syn::Item::Impl(i) => &i.attrs,
                _ => &[],
            };
            if !is_test_only(attrs) {
                v.visit_item(item);
            }
        }
        out.extend(v.out);
    }
    out
}

pub fn entities_sources() -> BTreeMap<String, String> {
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../entities/src"))
}

pub fn api_sources() -> BTreeMap<String, String> {
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src"))
}
