//! The README's two commands build each dependency once: `cargo run -p api` and the tests
//! (`cargo test --workspace`) resolve every shared dependency with the same features, so
//! running one after the other rebuilds nothing (the workspace's `resolver = "1"`). A
//! feature only the tests turn on would otherwise rebuild that crate and everything above
//! it, minutes on this machine.
use std::collections::{BTreeMap, BTreeSet};

/// `cargo tree`'s packages with their features, for `args`.
fn features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let out = std::process::Command::new(env!("CARGO"))
        .arg("tree")
        .args(args)
        .args(["--locked", "--prefix", "none", "--format", "{p} [{f}]"])
        .current_dir(root)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut by_package: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, rest)) = line.split_once(" [") else {
            continue;
        };
        // "name v1.2.3 (path)" or "name v1.2.3 (*)": the name and version name it.
        let id: Vec<&str> = package.split_whitespace().take(2).collect();
        // "[a,b]" or, for a package already listed, "[a,b] (*)".
        let listed = rest.split(']').next().unwrap_or_default();
        let features = listed.split(',').filter(|f| !f.is_empty());
        by_package
            .entry(id.join(" "))
            .or_default()
            .extend(features.map(str::to_string));
    }
    by_package
}

#[test]
fn running_the_service_and_running_the_tests_build_each_dependency_with_one_feature_set() {
    let run = features(&["-p", "api", "-e", "normal,build"]);
    let test = features(&["--workspace", "-e", "normal,build,dev"]);
    assert!(run.len() > 100, "{} packages", run.len());
    let differ: Vec<String> = run
        .iter()
        .filter_map(|(p, f)| {
            let t = test.get(p)?;
            (t != f).then(|| {
                format!(
                    "{p}: the tests add {:?}",
                    t.difference(f).collect::<Vec<_>>()
                )
            })
        })
        .collect();
    assert!(
        differ.is_empty(),
        "`cargo run -p api` and `cargo test --workspace` would build these twice:\n{}",
        differ.join("\n")
    );
}
