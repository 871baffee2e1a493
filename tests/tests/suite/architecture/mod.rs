//! The shape of `api/src` (issues 27 and 46), read with `syn` (see `reader`):
//! - no two modules reach each other through what they name, parent and child included;
//! - every path points down the dependency rule
//!   binaries -> startup -> {http, jobs} -> {console, cli} -> state -> idempotency -> domain
//!   -> store, with `infra`, `error`, `config` and `envelope` as leaves for all;
//! - every top-level module has its place in that rule, so a new one fails until named;
//! - `http` names nothing of `entities` or `sea_orm`, and only `store` builds queries.
//!
//! Circles and `http`'s use of `entities` hold with a list of the modules not yet moved
//! (issue 46): a module off the list that breaks the rule fails, and so does a listed module
//! that no longer does, so the lists only shrink.
mod reader;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use reader::{Reading, module_of, read, sources};

fn api() -> Reading {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src");
    let reading = read(&sources(&root));
    assert!(
        reading.modules.len() > 100,
        "read {} modules under {root:?}",
        reading.modules.len()
    );
    reading
}

/// Module -> the modules of the crate it names (itself and the crate root left out).
fn edges(r: &Reading) -> BTreeMap<String, BTreeSet<String>> {
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

/// One circle through each module that lies on any, reported once per circle.
fn circles(r: &Reading) -> Vec<String> {
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
fn tangled(r: &Reading) -> BTreeSet<String> {
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
fn room(module: &str) -> Option<(&str, u8)> {
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

fn unranked(r: &Reading) -> Vec<String> {
    r.modules
        .iter()
        .filter(|m| room(m).is_none())
        .cloned()
        .collect()
}

fn against_the_rule(r: &Reading) -> Vec<String> {
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

fn in_room(module: &str, top: &str) -> bool {
    module == top || module.starts_with(&format!("{top}::"))
}

/// What each module names of `entities` or `sea_orm` although it is under `http`.
fn persistence_in_http(r: &Reading) -> BTreeMap<String, BTreeSet<String>> {
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
const SEA_ORM_BUILDING: &[&str] = &[
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
const ENTITY_BUILDING: &[&str] = &[
    "Entity",
    "Column",
    "ActiveModel",
    "PrimaryKey",
    "Relation",
    "prelude",
    "*",
];
const RAW_STATEMENTS: &[&str] = &[
    ".execute_unprepared",
    ".query_one",
    ".query_all",
    ".query_one_raw",
    ".query_all_raw",
    ".execute_raw",
];

fn queries_outside_store(r: &Reading) -> BTreeMap<String, BTreeSet<String>> {
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
fn ratchet(rule: &str, found: BTreeMap<String, BTreeSet<String>>, still: &[&str]) {
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

#[test]
fn the_reader_sees_what_each_module_names() {
    let r = api();
    let edges = edges(&r);
    assert!(
        edges.get("domain::payments::pay").is_some_and(
            |e| e.contains("store::payments") && e.contains("domain::customers::wallets")
        ),
        "domain::payments::pay names store::payments and domain::customers::wallets: {:?}",
        edges.get("domain::payments::pay")
    );
    // A test module (`#[cfg(test)] mod tests;` at the top of `http/fields/mod.rs`) hides
    // nothing after it.
    assert!(
        edges
            .get("http::pipeline::fields")
            .is_some_and(|e| !e.is_empty()),
        "http::pipeline::fields is read past its test module"
    );
    assert!(
        !r.modules.contains("http::pipeline::fields::tests"),
        "test-only modules are not read"
    );
}

/// Modules still on a circle with their parent or a sibling (issue 46 regroups them): a
/// `mod.rs` that both holds what its children share and uses them.
const STILL_ON_A_CIRCLE: &[&str] = &[
    "console",
    "console::audit",
    "console::dead_letters",
    "console::health",
    "console::login",
    "console::tenants",
    "console::webhooks",
    "domain::customers::enrollment",
    "domain::customers::enrollment::claim",
    "domain::customers::enrollment::initiate",
    "domain::customers::enrollment::verify",
    "domain::payments",
    "domain::payments::basket",
    "domain::payments::otp",
    "domain::payments::pay",
    "domain::payments::qr",
    "domain::payments::reverse",
    "domain::topups",
    "domain::topups::settlements",
    "domain::topups::settlements::confirm",
    "domain::topups::sku_topup",
    "domain::webhooks",
    "domain::webhooks::operator",
    "http::customers::enrollment",
    "http::customers::enrollment::claims",
    "http::incentives",
    "http::incentives::offers",
    "http::incentives::reload_bonus",
    "http::payments",
    "http::payments::qr",
    "http::payments::reverse",
    "http::pipeline::fields",
    "http::pipeline::fields::sets",
    "http::pipeline::fields::text",
    "http::webhooks",
    "http::webhooks::deliveries",
    "idempotency",
    "idempotency::claim",
    "idempotency::execute",
    "idempotency::replay",
    "infra::kv",
    "infra::kv::compound",
    "infra::kv::counters",
    "infra::kv::local",
    "infra::kv::redis_conn",
    "jobs",
    "jobs::relay",
    "jobs::retry",
    "jobs::runtime",
    "jobs::sms",
    "jobs::sms::http_provider",
    "jobs::sms::mock",
    "jobs::sms_send",
    "jobs::webhook_batch",
    "jobs::webhook_deliver",
];

#[test]
fn no_two_modules_of_the_api_import_each_other_through_any_path() {
    let r = api();
    let found = tangled(&r);
    let still: BTreeSet<&str> = STILL_ON_A_CIRCLE.iter().copied().collect();
    let new: Vec<String> = circles(&r)
        .into_iter()
        .filter(|c| c.split(" -> ").any(|m| !still.contains(m)))
        .collect();
    assert!(
        new.is_empty(),
        "modules that name each other (break the circle with a leaf module both may use):\n{}",
        new.join("\n")
    );
    let done: Vec<&&str> = still.iter().filter(|m| !found.contains(**m)).collect();
    assert!(
        done.is_empty(),
        "these modules are on no circle now, strike them from the list: {done:?}"
    );
}

#[test]
fn every_import_points_down_the_dependency_rule() {
    let wrong = against_the_rule(&api());
    assert!(
        wrong.is_empty(),
        "paths against the rule binaries -> startup -> {{http, jobs}} -> {{console, cli}} -> \
         state -> idempotency -> domain -> store, leaves (infra, error, config, envelope) for all \
         (move what both need into the lower room or a leaf):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_top_level_module_has_its_place_in_the_rule() {
    let found = unranked(&api());
    assert!(
        found.is_empty(),
        "modules the dependency rule does not place (give their room a rank in `room`): {found:?}"
    );
}

/// Modules of `http` that still name `entities` or `sea_orm` (issue 46 moves them out).
const HTTP_STILL_NAMING_PERSISTENCE: &[&str] = &[
    "http::credentials::keys",
    "http::customers",
    "http::customers::enrollment",
    "http::incentives",
    "http::incentives::budgets",
    "http::incentives::offers",
    "http::incentives::reload_bonus",
    "http::operator::dead_letters",
    "http::payments",
    "http::payments::checkout",
    "http::payments::reverse",
    "http::pipeline::mutation",
    "http::topups",
    "http::topups::settlements",
    "http::transactions",
    "http::transactions::disputes",
    "http::webhooks",
    "http::webhooks::deliveries",
];

#[test]
fn http_names_nothing_of_entities_or_sea_orm() {
    ratchet(
        "http names entities or sea_orm",
        persistence_in_http(&api()),
        HTTP_STILL_NAMING_PERSISTENCE,
    );
}

#[test]
fn only_store_builds_queries() {
    ratchet(
        "a query built outside store",
        queries_outside_store(&api()),
        &[],
    );
}

// The holes of the text reader this replaced, each shown to be closed on a crate of a few
// files.
fn crate_of(files: &[(&str, &str)]) -> Reading {
    read(
        &files
            .iter()
            .map(|(m, s)| (m.to_string(), s.to_string()))
            .collect(),
    )
}

#[test]
fn code_after_a_test_module_declared_at_the_top_is_read() {
    let r = crate_of(&[
        ("", "pub mod domain; pub mod http;"),
        (
            "domain",
            "#[cfg(test)]\nmod tests;\n\nuse crate::http::Reply;\npub fn f() {}",
        ),
        ("domain::tests", "use crate::http::Anything;"),
        ("http", "pub struct Reply;"),
    ]);
    assert_eq!(against_the_rule(&r), vec!["domain names http".to_string()]);
}

#[test]
fn a_parent_and_its_child_that_name_each_other_are_a_circle() {
    let r = crate_of(&[
        ("", "pub mod domain;"),
        ("domain", "mod pay;\npub use pay::pay;\npub struct Money;"),
        ("domain::pay", "use super::Money;\npub fn pay(_: Money) {}"),
    ]);
    assert_eq!(
        circles(&r),
        vec!["domain -> domain::pay -> domain".to_string()]
    );
}

#[test]
fn a_url_in_a_string_hides_nothing_after_it() {
    let r = crate_of(&[
        ("", "pub mod domain; pub mod http;"),
        (
            "domain",
            "pub fn f() -> &'static str { let _ = \"http://x\"; crate::http::g() }",
        ),
        ("http", "pub fn g() -> &'static str { \"\" }"),
    ]);
    assert_eq!(against_the_rule(&r), vec!["domain names http".to_string()]);
}

#[test]
fn a_new_top_level_module_fails_until_the_rule_places_it() {
    let r = crate_of(&[("", "pub mod reports;"), ("reports", "pub fn run() {}")]);
    assert_eq!(unranked(&r), vec!["reports".to_string()]);
}

#[test]
fn query_building_is_seen_through_aliases_globs_and_macros() {
    let r = crate_of(&[
        ("", "pub mod domain; pub mod http; pub mod store;"),
        (
            "domain",
            "use sea_orm::ActiveValue::Set as Put;\n\
             pub fn f() { let _ = entities::wallet::ActiveModel { id: Put(1) }; }",
        ),
        (
            "http",
            "use sea_orm::prelude::*;\npub fn g() { tracing::info!(\"{:?}\", entities::wallet::Model::default()); }",
        ),
        ("store", "use sea_orm::{EntityTrait, Set};\npub fn h() {}"),
    ]);
    let outside = queries_outside_store(&r);
    assert_eq!(
        outside.keys().cloned().collect::<Vec<_>>(),
        vec!["domain".to_string(), "http".to_string()],
        "{outside:?}"
    );
    assert!(outside["domain"].iter().any(|w| w.contains("Set")));
    let in_http = persistence_in_http(&r);
    assert!(
        in_http["http"]
            .iter()
            .any(|w| w.starts_with("entities::wallet::Model")),
        "a path inside a macro call is read: {in_http:?}"
    );
}

mod states;

#[test]
fn every_state_column_is_a_closed_set() {
    let found = states::string_state_columns(&states::entities_sources());
    assert!(
        found.is_empty(),
        "status or state columns typed as strings (make them a `states!` enum):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_state_is_compared_as_a_string() {
    let found = states::string_state_comparisons(&states::api_sources());
    assert!(
        found.is_empty(),
        "states compared with string literals (compare the enum):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_state_checks_see_each_way_of_comparing() {
    let src = |body: &str| {
        [("domain".to_string(), body.to_string())]
            .into_iter()
            .collect()
    };
    for (body, shape) in [
        ("pub fn f(p: &P) -> bool { p.status == \"voided\" }", "=="),
        (
            "pub fn f(g: &G) -> u8 { match g.state.as_str() { \"LOCKED\" => 1, _ => 0 } }",
            "match",
        ),
        (
            "pub fn f(g: &G) -> bool { matches!(g.state.as_str(), \"RELEASED\" | \"LOCKED\") }",
            "matches!",
        ),
    ] {
        assert_eq!(
            states::string_state_comparisons(&src(body)).len(),
            1,
            "{shape} is seen"
        );
    }
    let typed = "pub fn f(p: &P) -> bool { p.status == Status::Voided && p.note == \"x\" }";
    assert!(states::string_state_comparisons(&src(typed)).is_empty());
    let entity = [(
        "payment".to_string(),
        "pub struct Model { pub id: Uuid, pub status: String, pub resolution_state: Option<String> }"
            .to_string(),
    )]
    .into_iter()
    .collect();
    assert_eq!(states::string_state_columns(&entity).len(), 2);
}

#[test]
fn a_value_named_like_a_child_module_is_not_an_edge() {
    let r = crate_of(&[
        ("", "pub mod domain;"),
        (
            "domain",
            "pub mod disputes;\npub struct Detail { pub disputes: Vec<u8> }\n\
             pub fn detail() -> Detail { let disputes = Vec::new(); Detail { disputes } }",
        ),
        (
            "domain::disputes",
            "use super::detail;\npub fn f() { detail(); }",
        ),
    ]);
    assert!(circles(&r).is_empty(), "{:?}", circles(&r));
}

#[test]
fn no_folder_holds_more_than_fifteen_entries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src");
    let mut crowded = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        stack.extend(entries.iter().filter(|p| p.is_dir()).cloned());
        if entries.len() > 15 {
            let name = match dir.strip_prefix(&root).unwrap().to_string_lossy() {
                n if n.is_empty() => "api/src".to_string(),
                n => n.into_owned(),
            };
            crowded.insert(name, BTreeSet::from([format!("{} entries", entries.len())]));
        }
    }
    ratchet("a folder with more than 15 entries", crowded, &[]);
}
