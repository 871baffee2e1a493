//! The pages a newcomer reads first stay true and short (issue 46):
//! - `docs/configuration.md` is the settings' reference: its table names every `WALLET_*`
//!   setting the service reads, and nothing else, with each setting's default as
//!   `Config::default()` has it. A setting added, renamed or given another default without
//!   the page fails here.
//! - `README.md` is a front page of at most 300 lines that links every page under `docs/`
//!   a reader starts from, and every link in it leads to a file that exists.
use std::collections::BTreeMap;

use serde_json::Value;

fn repository_file(path: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(path),
    )
    .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The table's rows: variable -> its Default cell.
fn documented() -> BTreeMap<String, String> {
    let page = repository_file("docs/configuration.md");
    let mut rows = BTreeMap::new();
    for line in page.lines().filter(|l| l.starts_with("| `WALLET_")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let name = cells[0].trim_matches('`').to_string();
        assert!(
            rows.insert(name.clone(), cells[1].to_string()).is_none(),
            "{name} has two rows"
        );
    }
    rows
}

/// Every setting with its default, as the service loads them (`WALLET_` + the field name).
fn settings() -> BTreeMap<String, Value> {
    let Value::Object(fields) = serde_json::to_value(api::config::Config::default()).unwrap()
    else {
        panic!("Config serializes as an object")
    };
    fields
        .into_iter()
        .map(|(k, v)| (format!("WALLET_{}", k.to_uppercase()), v))
        .collect()
}

#[test]
fn the_configuration_page_lists_every_setting_and_only_those() {
    let page = documented();
    let code = settings();
    let undocumented: Vec<&String> = code.keys().filter(|k| !page.contains_key(*k)).collect();
    let unknown: Vec<&String> = page.keys().filter(|k| !code.contains_key(*k)).collect();
    assert!(
        undocumented.is_empty(),
        "settings missing from docs/configuration.md: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "docs/configuration.md lists what the service does not read: {unknown:?}"
    );
}

#[test]
fn each_documented_default_is_the_one_the_service_takes() {
    let page = documented();
    let mut wrong = Vec::new();
    for (name, default) in settings() {
        let Some(cell) = page.get(&name) else {
            continue;
        };
        // A cell that opens with a literal states the default; a setting with no default
        // of its own (derived from the mode, or off) must not open with one.
        let stated = cell
            .strip_prefix('`')
            .and_then(|rest| rest.split_once('`'))
            .map(|(literal, _)| literal.to_string());
        let actual = match &default {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        if stated != actual {
            wrong.push(format!(
                "{name}: page says {cell:?}, the service {actual:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "defaults that differ:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_readme_is_a_front_page_whose_links_all_lead_somewhere() {
    let readme = repository_file("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the front page keeps to 300"
    );
    for needed in [
        "## Two commands",
        "## First sandbox payment",
        "## What it does",
        "docs/configuration.md",
        "docs/api-guide.md",
        "docs/architecture.md",
    ] {
        assert!(readme.contains(needed), "README.md lacks {needed}");
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut broken = Vec::new();
    for part in readme.split("](").skip(1) {
        let target = part.split(')').next().unwrap_or("");
        let file = target.split('#').next().unwrap_or("");
        if file.is_empty() || file.contains("://") {
            continue;
        }
        if !root.join(file).exists() {
            broken.push(target.to_string());
        }
    }
    assert!(broken.is_empty(), "README.md links to nothing: {broken:?}");
}
