//! The holes of the text reader this replaced, each shown closed on a crate of a few files,
//! and the other rules' checks shown to see what they look for.
use super::{
    reader::{Reading, read},
    rules::*,
    states,
};

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
