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
mod holes;
mod idempotency;
mod reader;
mod rules;
mod states;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use reader::{Reading, read, sources};
use rules::*;

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
const HTTP_STILL_NAMING_PERSISTENCE: &[&str] = &[];

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

/// A function of more than seven arguments takes a parameter struct (a list operation's
/// query parameters: a `query_group!`), never an allowance, nor a raised clippy threshold.
#[test]
fn no_function_is_allowed_too_many_arguments() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut allowed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for dir in [
        "api/src",
        "worker/src",
        "entities/src",
        "migration/src",
        "tests",
    ] {
        for (module, text) in sources(&root.join(dir)) {
            for (n, line) in text.lines().enumerate() {
                if line.contains("too_many_arguments") {
                    allowed
                        .entry(format!("{dir}: {module}"))
                        .or_default()
                        .insert(format!("line {}", n + 1));
                }
            }
        }
    }
    // This test's own name for the lint.
    allowed.retain(|m, _| !m.ends_with("architecture"));
    for config in ["clippy.toml", ".clippy.toml"] {
        let text = std::fs::read_to_string(root.join(config)).unwrap_or_default();
        if text.contains("too-many-arguments-threshold") {
            allowed
                .entry(config.to_string())
                .or_default()
                .insert("raises the threshold".to_string());
        }
    }
    ratchet("too_many_arguments allowed", allowed, &[]);
}

#[test]
fn the_idempotency_key_header_is_read_in_one_place() {
    let sources = states::api_sources();
    // The early replay parses it; the OpenAPI listing and the framework's error mapping
    // name the documented parameter, reading no request.
    let readers: BTreeSet<String> = idempotency::header_readers(&sources)
        .into_iter()
        .filter(|m| m != "http::openapi::error_listing")
        .collect();
    assert_eq!(
        readers,
        BTreeSet::from(["http::pipeline::early_replay".to_string()]),
        "the Idempotency-Key header is parsed once, by the early replay layer"
    );
}

#[test]
fn every_key_format_of_idempotency_lives_in_one_module() {
    assert_eq!(
        idempotency::key_formatters(&states::api_sources()),
        BTreeSet::from(["infra::kv::idempotency_keys".to_string()])
    );
}

#[test]
fn the_authenticated_caller_carries_nothing_of_idempotency() {
    let sources = states::api_sources();
    let fields = idempotency::principal_fields(&sources["domain::credentials::principal"]);
    let expected = [
        "kind",
        "key_id",
        "integration_id",
        "scope",
        "is_sandbox",
        "expires_at",
        "permissions",
        "cashier_id",
        "terminal_id",
        "linked_merchants",
        "clock",
    ];
    assert_eq!(
        fields,
        expected.iter().map(|f| f.to_string()).collect(),
        "what a request's Idempotency-Key fetched rides in `idempotency::Presented`"
    );
}

/// One name each (issue 46): `Principal` is the authenticated caller, `Acting` the scope a
/// domain operation acts for, and there is one `RequestContext`.
#[test]
fn the_caller_the_acting_scope_and_the_request_context_have_one_type_each() {
    let mut structs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (module, text) in states::api_sources() {
        for item in syn::parse_file(&text).unwrap().items {
            if let syn::Item::Struct(s) = item {
                structs
                    .entry(s.ident.to_string())
                    .or_default()
                    .push(module.clone());
            }
        }
    }
    for (name, home) in [
        ("Principal", "domain::credentials::principal"),
        ("Acting", "domain::credentials::scope"),
        ("RequestContext", "http::pipeline::common"),
    ] {
        assert_eq!(structs.get(name), Some(&vec![home.to_string()]), "{name}");
    }
    for overlapping in ["Caller", "CallerContext", "Actor"] {
        assert!(
            !structs.contains_key(overlapping),
            "{overlapping}: name the caller `Principal` and the scope `Acting`"
        );
    }
}

/// The first architecture step's bound (issue 27), held: a file past 600 lines is two
/// concerns waiting to be split.
#[test]
fn no_file_of_the_api_is_over_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src");
    let mut long = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for path in std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                if lines > 600 {
                    let name = path.strip_prefix(&root).unwrap().display().to_string();
                    long.insert(name, BTreeSet::from([format!("{lines} lines")]));
                }
            }
        }
    }
    ratchet("a file over 600 lines", long, &[]);
}
