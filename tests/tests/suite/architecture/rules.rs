//! The rules the architecture tests apply to a reading of a crate: its edges and circles,
//! the rank of each room, what `http` and the rooms outside `store` may not name, and the
//! ratchet that holds a rule with a list of modules still to move.
use std::collections::{BTreeMap, BTreeSet};

use super::reader::{Reading, module_of};

/// Module -> the modules of the crate it names (itself and the crate root left out).
pub(super) fn edges(r: &Reading) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for n in &r.named {
        if let Some(to) = module_of(&r.modules, &n.path)
            && to != n.from
        {
            out.entry(n.from.clone()).or_default().insert(to);
        }
    }
    out
}

/// A path back to `from` through `edges`, if there is one.
pub(super) fn circle(
    edges: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
) -> Option<Vec<String>> {
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

/// One circle through each module that lies on any, reported once per circle.
pub(super) fn circles(r: &Reading) -> Vec<String> {
    let edges = edges(r);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for m in &r.modules {
        if let Some(c) = circle(&edges, m) {
            let mut key: Vec<String> = c[..c.len() - 1].to_vec();
            key.sort();
            if seen.insert(key) {
                out.push(c.join(" -> "));
            }
        }
    }
    out
}

/// Every module that lies on some circle.
pub(super) fn tangled(r: &Reading) -> BTreeSet<String> {
    let edges = edges(r);
    r.modules
        .iter()
        .filter(|m| circle(&edges, m).is_some())
        .cloned()
        .collect()
}

/// The room of a top-level module and its rank in the dependency rule; `None` for a module
/// the rule does not name yet.
/// binaries -> startup -> {http, jobs} -> {console, cli} -> state -> idempotency -> domain
/// -> store (the router mounts the console's pages; the console and the operator CLI are
/// edges of their own over the same domain); the leaves (`infra`, `error`, `config`,
/// `envelope`) may be used by all and use only leaves. The crate root (`lib.rs`) only
/// declares and re-exports.
pub(super) fn room(module: &str) -> Option<(&str, u8)> {
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
        "" => 8,
        _ => return None,
    };
    Some((top, rank))
}

pub(super) fn unranked(r: &Reading) -> Vec<String> {
    r.modules
        .iter()
        .filter(|m| room(m).is_none())
        .cloned()
        .collect()
}

pub(super) fn against_the_rule(r: &Reading) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, targets) in edges(r) {
        let Some((from_room, from_rank)) = room(&from) else {
            continue;
        };
        for to in targets {
            let Some((to_room, to_rank)) = room(&to) else {
                continue;
            };
            if to_room != from_room && to_rank > 0 && to_rank >= from_rank {
                wrong.push(format!("{from} names {to}"));
            }
        }
    }
    wrong
}

pub(super) fn in_room(module: &str, top: &str) -> bool {
    module == top || module.starts_with(&format!("{top}::"))
}

/// What each module names of `entities` or `sea_orm` although it is under `http`.
pub(super) fn persistence_in_http(r: &Reading) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for n in &r.named {
        if in_room(&n.from, "http")
            && matches!(
                n.path.first().map(String::as_str),
                Some("entities" | "sea_orm")
            )
        {
            out.entry(n.from.clone()).or_default().insert(format!(
                "{}:{}",
                n.path.join("::"),
                n.line
            ));
        }
    }
    out
}

/// sea-orm's query building: the traits that build or run a query, the values an active
/// model is set with, raw statements, and an entity's `Entity`, `Column` and
/// `ActiveModel` (its `Model` is plain data any layer may hold).
pub(super) const SEA_ORM_BUILDING: &[&str] = &[
    "EntityTrait",
    "QueryFilter",
    "QuerySelect",
    "QueryOrder",
    "QueryTrait",
    "ActiveModelTrait",
    "ActiveModelBehavior",
    "ActiveValue",
    "IntoActiveModel",
    "Set",
    "NotSet",
    "Unchanged",
    "Statement",
    "ColumnTrait",
    "Condition",
    "PaginatorTrait",
    "ModelTrait",
    "LoaderTrait",
    "FromQueryResult",
    "RelationTrait",
    "JoinType",
    "sea_query",
    "prelude",
    "*",
];
pub(super) const ENTITY_BUILDING: &[&str] = &[
    "Entity",
    "Column",
    "ActiveModel",
    "PrimaryKey",
    "Relation",
    "prelude",
    "*",
];
pub(super) const RAW_STATEMENTS: &[&str] = &[
    ".execute_unprepared",
    ".query_one",
    ".query_all",
    ".query_one_raw",
    ".query_all_raw",
    ".execute_raw",
];

pub(super) fn queries_outside_store(r: &Reading) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for n in &r.named {
        if in_room(&n.from, "store") {
            continue;
        }
        let first = n.path.first().map(String::as_str);
        let rest = || n.path.iter().skip(1).map(String::as_str);
        let builds = match first {
            Some("sea_orm") => rest().any(|s| SEA_ORM_BUILDING.contains(&s)),
            Some("entities") => rest().any(|s| ENTITY_BUILDING.contains(&s)),
            Some(m) if m.starts_with('.') => RAW_STATEMENTS.contains(&m),
            _ => false,
        };
        if builds {
            out.entry(n.from.clone()).or_default().insert(format!(
                "{}:{}",
                n.path.join("::"),
                n.line
            ));
        }
    }
    out
}

/// Holds a rule with the list of modules that still break it: a module off the list that
/// breaks it, or a listed one that no longer does, fails.
pub(super) fn ratchet(rule: &str, found: BTreeMap<String, BTreeSet<String>>, still: &[&str]) {
    let still: BTreeSet<&str> = still.iter().copied().collect();
    let new: Vec<String> = found
        .iter()
        .filter(|(m, _)| !still.contains(m.as_str()))
        .map(|(m, what)| {
            format!(
                "{m}: {}",
                what.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let done: Vec<&&str> = still.iter().filter(|m| !found.contains_key(**m)).collect();
    assert!(new.is_empty(), "{rule}, broken by:\n{}", new.join("\n"));
    assert!(
        done.is_empty(),
        "{rule}: these modules hold it now, strike them from the list: {done:?}"
    );
}
