//! Reads `api/src` as Rust, not as text: every file is parsed with `syn`, so a string such as
//! `"http://"` is a literal and never a comment, and every item outside `#[cfg(test)]` (a
//! test module declared at the top of a file hides nothing below it) contributes the paths it
//! names: `use` trees, paths in types, expressions and patterns, and paths written inside
//! macro calls. Each path is resolved the way rustc resolves it (`crate::`, `super::`,
//! `self::`, a child module, or a name a `use` brought in), so an import through an alias is
//! still an edge to the module it names.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// One path a module names, resolved from the crate root (`["domain", "payments", "pay"]`)
/// or, for another crate, starting with that crate's name (`["sea_orm", "EntityTrait"]`).
#[derive(Debug, Clone)]
pub struct Named {
    pub from: String,
    pub path: Vec<String>,
    pub line: usize,
}

pub struct Reading {
    /// Every module, file or inline, by its path (`""` is the crate root).
    pub modules: BTreeSet<String>,
    pub named: Vec<Named>,
}

/// The sources under `root`, keyed by the module each file is: `http/mod.rs` is `http`,
/// `lib.rs` the root. `main.rs` is the binary, a crate of its own, and is not read.
pub fn sources(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap().with_extension("");
                let mut parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts == ["main"] {
                    continue;
                }
                if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] {
                    parts.pop();
                }
                out.insert(parts.join("::"), fs::read_to_string(&path).unwrap());
            }
        }
    }
    out
}

/// Parses every source and collects what each module names. A file that does not parse
/// fails the reading: a rule test must never pass by skipping what it cannot read.
pub fn read(sources: &BTreeMap<String, String>) -> Reading {
    let mut files = BTreeMap::new();
    for (module, text) in sources {
        let file = syn::parse_file(text)
            .unwrap_or_else(|e| panic!("{module}: not Rust syn can read: {e}"));
        files.insert(module.clone(), file);
    }
    // Modules only a test build compiles (`#[cfg(test)] mod tests;`), with all below them.
    let mut test_only = BTreeSet::new();
    let mut modules: BTreeSet<String> = files.keys().cloned().collect();
    for (module, file) in &files {
        inline_modules(module, &file.items, &mut modules, &mut test_only);
    }
    let skipped = |m: &str| {
        test_only
            .iter()
            .any(|t: &String| m == t || m.starts_with(&format!("{t}::")))
    };
    files.retain(|m, _| !skipped(m));
    modules.retain(|m| !skipped(m));
    // First every module's `use` names, so a path through another module's import (a
    // parent's `pub use child::Thing`) is followed to where the thing is.
    let mut imports = BTreeMap::new();
    for (module, file) in &files {
        collect_imports(module, &file.items, &mut imports);
    }
    let names = Names {
        modules: &modules,
        imports: &imports,
    };
    let mut named = Vec::new();
    for (module, file) in &files {
        read_items(module, &file.items, &names, &mut named);
    }
    Reading { modules, named }
}

fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}::{name}")
    }
}

pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>().is_ok_and(|m| {
                let t = quote_of(&m);
                t == "test" || (t.starts_with("all") && t.contains("test") && !t.contains("not"))
            })
    })
}

fn quote_of(m: &syn::Meta) -> String {
    use quote::ToTokens;
    m.to_token_stream().to_string()
}

fn inline_modules(
    at: &str,
    items: &[syn::Item],
    modules: &mut BTreeSet<String>,
    test_only: &mut BTreeSet<String>,
) {
    for item in items {
        if let syn::Item::Mod(m) = item {
            let path = child(at, &m.ident.to_string());
            if is_test_only(&m.attrs) {
                test_only.insert(path.clone());
            }
            if let Some((_, inner)) = &m.content {
                modules.insert(path.clone());
                inline_modules(&path, inner, modules, test_only);
            }
        }
    }
}

fn collect_imports(
    module: &str,
    items: &[syn::Item],
    out: &mut BTreeMap<String, BTreeMap<String, Vec<String>>>,
) {
    // The names `use` brings into this module's scope, wherever in it they stand (a `use`
    // inside a function body included): a name and the path it stands for.
    struct Uses<'a>(&'a mut BTreeMap<String, Vec<String>>);
    impl<'ast> Visit<'ast> for Uses<'_> {
        fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
            let mut leaves = Vec::new();
            use_leaves(Vec::new(), &u.tree, &mut leaves);
            for (path, bound, _) in leaves {
                if let Some(name) = bound {
                    self.0.entry(name).or_insert(path);
                }
            }
        }
        fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}
    }
    let mine = out.entry(module.to_string()).or_default();
    for item in items {
        if !is_test_only(item_attrs(item)) && !matches!(item, syn::Item::Mod(_)) {
            Uses(mine).visit_item(item);
        }
    }
    for item in items {
        if let syn::Item::Mod(m) = item
            && let Some((_, inner)) = &m.content
            && !is_test_only(&m.attrs)
        {
            collect_imports(&child(module, &m.ident.to_string()), inner, out);
        }
    }
}

fn read_items(module: &str, items: &[syn::Item], names: &Names, out: &mut Vec<Named>) {
    let mut walker = Walker { module, names, out };
    for item in items {
        if is_test_only(item_attrs(item)) {
            continue;
        }
        match item {
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    read_items(
                        &child(module, &m.ident.to_string()),
                        inner,
                        names,
                        walker.out,
                    );
                }
            }
            other => walker.visit_item(other),
        }
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Every leaf of a `use` tree: its full path (ending in `*` for a glob), the name it binds
/// (None for a glob or `_`) and its line.
fn use_leaves(
    prefix: Vec<String>,
    tree: &syn::UseTree,
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) {
    let with = |name: String| {
        let mut p = prefix.clone();
        p.push(name);
        p
    };
    match tree {
        syn::UseTree::Path(p) => use_leaves(with(p.ident.to_string()), &p.tree, out),
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let line = n.ident.span().start().line;
            if name == "self" {
                let bound = prefix.last().cloned();
                out.push((prefix.clone(), bound, line));
            } else {
                out.push((with(name.clone()), Some(name), line));
            }
        }
        syn::UseTree::Rename(r) => {
            let bound = r.rename.to_string();
            let line = r.ident.span().start().line;
            let path = if r.ident == "self" {
                prefix.clone()
            } else {
                with(r.ident.to_string())
            };
            out.push((path, (bound != "_").then_some(bound), line));
        }
        syn::UseTree::Glob(g) => out.push((with("*".into()), None, g.star_token.span.start().line)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(prefix.clone(), t, out);
            }
        }
    }
}

/// The crate's modules and what each one's `use` items bring in: enough to resolve a path
/// the way rustc does.
struct Names<'a> {
    modules: &'a BTreeSet<String>,
    imports: &'a BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Names<'_> {
    /// The absolute path `segs` names when written in `module`. A single segment counts only
    /// when a `use` brought it in (`Set(..)` after `use sea_orm::Set`); in a `use` tree, a
    /// first segment that is neither a keyword, a child module nor an import is another
    /// crate.
    fn absolute(&self, module: &str, segs: &[String], in_use: bool) -> Option<Vec<String>> {
        self.absolute_within(module, segs, in_use, 0)
    }

    fn absolute_within(
        &self,
        module: &str,
        segs: &[String],
        in_use: bool,
        depth: u8,
    ) -> Option<Vec<String>> {
        let first = segs.first()?;
        let here: Vec<String> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").map(String::from).collect()
        };
        let mut out = match first.as_str() {
            "crate" => segs[1..].to_vec(),
            "super" => {
                let mut base = here.clone();
                let mut rest = segs;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                base
            }
            "self" => here.iter().chain(&segs[1..]).cloned().collect(),
            "Self" => return None,
            // A child module, when the path goes on into it or a `use` names it (a lone
            // name in an expression is a value, even when a module is called the same).
            _ if (segs.len() > 1 || in_use) && self.modules.contains(&child(module, first)) => {
                here.iter().chain(segs).cloned().collect()
            }
            _ => match self.imports.get(module).and_then(|i| i.get(first)) {
                Some(target) if target.first() != Some(first) && depth < 16 => {
                    let mut p = self.absolute_within(module, target, true, depth + 1)?;
                    p.extend(segs[1..].iter().cloned());
                    p
                }
                _ if segs.len() > 1 || in_use => segs.to_vec(),
                _ => return None,
            },
        };
        out.retain(|s| !s.is_empty());
        Some(self.through_imports(out, depth))
    }

    /// Follows a path through the imports of the module it lands in: `domain::Money`, where
    /// `domain` only has `pub use money::Money`, is `domain::money::Money`.
    fn through_imports(&self, path: Vec<String>, depth: u8) -> Vec<String> {
        if depth >= 16 {
            return path;
        }
        let Some(m) = module_of(self.modules, &path) else {
            return path;
        };
        let taken = if m.is_empty() {
            0
        } else {
            m.split("::").count()
        };
        let Some(next) = path.get(taken) else {
            return path;
        };
        match self.imports.get(&m).and_then(|i| i.get(next)) {
            Some(target) if target.first() != Some(next) => {
                match self.absolute_within(&m, target, true, depth + 1) {
                    Some(mut p) => {
                        p.extend(path[taken + 1..].iter().cloned());
                        p
                    }
                    None => path,
                }
            }
            _ => path,
        }
    }
}

struct Walker<'a> {
    module: &'a str,
    names: &'a Names<'a>,
    out: &'a mut Vec<Named>,
}

impl Walker<'_> {
    fn push(&mut self, path: Vec<String>, line: usize) {
        self.out.push(Named {
            from: self.module.to_string(),
            path,
            line,
        });
    }

    fn path(&mut self, segs: Vec<String>, line: usize) {
        if let Some(p) = self.names.absolute(self.module, &segs, false) {
            self.push(p, line);
        }
    }

    /// Paths written inside a macro call (`json!`, `format!`, `tokio::select!`, `html!`):
    /// runs of identifiers joined by `::`. Literals are single tokens, so nothing inside a
    /// string is ever read as a path.
    fn tokens(&mut self, tokens: TokenStream) {
        let list: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < list.len() {
            match &list[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(id) => {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while is_colons(&list, j) {
                        match list.get(j + 2) {
                            Some(TokenTree::Ident(next)) => {
                                segs.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    let after_colons = i >= 2 && is_colons(&list, i - 2);
                    if segs.len() > 1 && !after_colons {
                        self.path(segs, line);
                    }
                    i = j.max(i + 1);
                }
                _ => i += 1,
            }
        }
    }
}

fn is_colons(list: &[TokenTree], at: usize) -> bool {
    matches!(
        (list.get(at), list.get(at + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':'
    )
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.path(segs, line);
        syn::visit::visit_path(self, p);
    }

    /// A method call is recorded as `.name` (raw statements are methods of a connection).
    fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
        let line = c.method.span().start().line;
        self.push(vec![format!(".{}", c.method)], line);
        syn::visit::visit_expr_method_call(self, c);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(Vec::new(), &u.tree, &mut leaves);
        for (path, _, line) in leaves {
            if let Some(p) = self.names.absolute(self.module, &path, true) {
                self.push(p, line);
            }
        }
    }

    // Test-only code inside a non-test item (a `#[cfg(test)] fn` in an impl) is not read.
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // Inline modules are read as modules of their own by `read_items`.
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)` and `pub(in crate::x)` say who may see an item, not what it uses.
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // `#[derive(..)]`, `#[oai(..)]` and the like name macros, not modules.
    }
}

/// The module a resolved path lands in: its longest prefix that is a module of the crate.
/// `None` for another crate's path, or an item of the crate root itself.
pub fn module_of(modules: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}
