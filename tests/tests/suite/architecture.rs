//! The shape of `api/src` (issue 27): modules import one way, so no two modules reach each
//! other through their imports, and every import points down the dependency rule
//! (binaries -> startup -> {http, jobs} -> {console, cli} -> state -> idempotency -> domain
//! -> store, with `infra`, `error`, `config` and `envelope` as leaves for all). This reads the sources as
//! text: every `use crate::…`, `use super::…` and inline `crate::…` path outside
//! `#[cfg(test)]` code is an edge from the importing module to the module the path names;
//! the tests fail on any circle, naming the modules on it, and on any edge against the
//! rule, naming both modules.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Module path (`domain::payments`) of each source file.
fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
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
                if parts.last().is_some_and(|p| p == "mod") {
                    parts.pop();
                }
                if parts == ["lib"] || parts == ["main"] {
                    parts.clear();
                }
                out.insert(parts.join("::"), path);
            }
        }
    }
    out
}

/// The source without comments and without its `#[cfg(test)]` tail.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `use` tree names: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = join(prefix, head);
        let (mut depth, mut start) = (0, 0);
        for (i, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&base, &inner[start..], out);
    } else if !tree.is_empty() {
        let path = tree.split(" as ").next().unwrap().trim();
        out.push(join(prefix, path));
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// The module a path from `from` names: the longest known prefix.
fn resolve(mods: &BTreeMap<String, PathBuf>, from: &str, path: &str) -> Option<String> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").collect()
    };
    let rest: Vec<&str> = match segs.first() {
        Some(&"crate") => {
            base.clear();
            segs[1..].to_vec()
        }
        Some(&"super") => {
            let mut s = &segs[..];
            while s.first() == Some(&"super") {
                base.pop();
                s = &s[1..];
            }
            s.to_vec()
        }
        Some(&"self") => segs[1..].to_vec(),
        _ => return None,
    };
    let full: Vec<&str> = base.into_iter().chain(rest).collect();
    (1..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|m| mods.contains_key(m))
}

fn edges(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, path) in mods {
        let src = code(path);
        let mut paths = Vec::new();
        let mut rest = &src[..];
        while let Some(i) = rest.find("use ") {
            let before = rest[..i].chars().last();
            rest = &rest[i + 4..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let stmt = &rest[..rest.find(';').unwrap_or(rest.len())];
            let stmt: String = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
            if ["crate", "super", "self"]
                .iter()
                .any(|r| stmt.starts_with(&format!("{r}::")) || stmt.starts_with(&format!("{r}{{")))
            {
                expand("", &stmt, &mut paths);
            }
        }
        for word in ["crate::", "super::"] {
            let mut at = 0;
            while let Some(i) = src[at..].find(word) {
                let start = at + i;
                at = start + word.len();
                if src[..start]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                {
                    continue;
                }
                let end = src[start..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .map_or(src.len(), |e| start + e);
                paths.push(src[start..end].trim_end_matches(':').to_string());
            }
        }
        for p in paths {
            if let Some(t) = resolve(mods, m, &p) {
                let related = t == *m
                    || t.starts_with(&format!("{m}::"))
                    || m.starts_with(&format!("{t}::"))
                    || t.is_empty()
                    || m.is_empty();
                if !related {
                    out.entry(m.clone()).or_default().insert(t);
                }
            }
        }
    }
    out
}

/// A path back to `from` through `edges`, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_string()]];
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in edges.get(last).into_iter().flatten() {
            if next == from {
                let mut c = path.clone();
                c.push(from.to_string());
                return Some(c);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push(p);
            }
        }
    }
    None
}

#[test]
fn no_two_modules_of_the_api_import_each_other_through_any_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src");
    let mods = modules(&root);
    assert!(
        mods.len() > 50,
        "read {} modules under {root:?}",
        mods.len()
    );
    let edges = edges(&mods);
    assert!(
        edges
            .get("domain::payments::pay")
            .is_some_and(|e| e.contains("store") && e.contains("domain::wallets")),
        "the reader sees imports (domain::payments::pay uses store and domain::wallets)"
    );
    let circles: Vec<String> = mods
        .keys()
        .filter_map(|m| circle(&edges, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(
        circles.is_empty(),
        "modules that import each other (break the circle with a leaf module both may use):\n{}",
        circles.join("\n")
    );
}

/// The room a module belongs to and its rank in the dependency rule: a module imports only
/// from rooms ranked below its own, from leaves, or from inside its own room.
/// binaries -> startup -> {http, jobs} -> {console, cli} -> state -> idempotency -> domain
/// -> store (the router mounts the console's pages; the console and the operator CLI are
/// edges of their own over the same domain); the leaves (`infra`, `error`, `config`,
/// `envelope`) may be used by all and use only leaves.
fn room(module: &str) -> (&str, u8) {
    let top = module.split("::").next().unwrap_or("");
    let rank = match top {
        "infra" | "error" | "config" | "envelope" => 0,
        "store" => 1,
        "domain" => 2,
        "idempotency" => 3,
        "state" => 4,
        "console" | "cli" => 5,
        "http" | "jobs" => 6,
        "startup" => 7,
        _ => 8,
    };
    (top, rank)
}

#[test]
fn every_import_points_down_the_dependency_rule() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src");
    let mods = modules(&root);
    let mut wrong = Vec::new();
    for (from, targets) in edges(&mods) {
        let (from_room, from_rank) = room(&from);
        for to in targets {
            let (to_room, to_rank) = room(&to);
            if to_room != from_room && to_rank > 0 && to_rank >= from_rank {
                wrong.push(format!("{from} imports {to}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the rule binaries -> startup -> {{http, jobs}} -> {{console, cli}} -> \
         state -> idempotency -> domain -> store, leaves (infra, error, config, envelope) for all \
         (move what both need into the lower room or a leaf):\n{}",
        wrong.join("\n")
    );
}
