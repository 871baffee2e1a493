//! The pages a newcomer reads first stay true and short (issue 46):
//! - `docs/configuration.md` is the settings' reference: its table names every `WALLET_*`
//!   setting the service reads, and nothing else, with each setting's default as
//!   `Config::default()` has it. A setting added, renamed or given another default without
//!   the page fails here.
//! - `README.md` is a front page of at most 300 lines that links every page under `docs/`
//!   a reader starts from, and every link in it leads to a file that exists.
//! - Every repository path named in a page, a script, the chart or a comment exists.
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

/// Files of the repository a reader or a script follows a path from: the pages, the scripts,
/// the chart and the sources' comments.
fn followed_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    const SKIPPED: [&str; 4] = ["target", ".git", "node_modules", ".venv"];
    const READ: [&str; 9] = ["md", "sh", "rs", "py", "yaml", "tpl", "toml", "txt", "run"];
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if !SKIPPED.contains(&name.as_str()) {
                    pending.push(path);
                }
            } else if path
                .extension()
                .is_some_and(|e| READ.contains(&e.to_string_lossy().as_ref()))
                || name == "run"
            {
                found.push(path);
            }
        }
    }
    found
}

/// A repository path named in prose, e.g. `api/src/config/mod.rs`: it starts at one of the
/// top-level folders and ends in a file extension.
fn named_paths(text: &str) -> Vec<String> {
    const TOP: [&str; 9] = [
        "api/",
        "worker/",
        "entities/",
        "migration/",
        "tests/",
        "bench/",
        "helm/",
        "docs/",
        ".ci/",
    ];
    const ENDINGS: [&str; 8] = [
        ".rs", ".sh", ".md", ".py", ".yaml", ".json", ".toml", ".tpl",
    ];
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    text.split(|c: char| !is_path_char(c))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| TOP.iter().any(|top| word.starts_with(top)))
        .filter(|word| ENDINGS.iter().any(|end| word.ends_with(end)))
        .filter(|word| !word.contains('*') && !word.contains(".."))
        .map(str::to_string)
        .collect()
}

/// A file moved without the pages, scripts and comments that name it strands the next reader
/// (a chart check once failed CI over the settings' file moving into `api/src/config/`).
#[test]
fn every_source_path_the_repository_names_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut stranded = Vec::new();
    for file in followed_files(&root) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for named in named_paths(&text) {
            if !root.join(&named).exists() {
                let from = file.strip_prefix(&root).unwrap_or(&file).display();
                stranded.push(format!("{from} names {named}"));
            }
        }
    }
    stranded.sort();
    stranded.dedup();
    assert!(
        stranded.is_empty(),
        "paths that lead nowhere: {stranded:#?}"
    );
}

#[test]
fn a_moved_file_is_caught_where_prose_names_it() {
    let prose = concat!(
        "see `api/src/",
        "config.rs` (and tests/run.sh.) or https://x/api/y"
    );
    let named = named_paths(prose);
    assert_eq!(named, [concat!("api/src/", "config.rs"), "tests/run.sh"]);
}
