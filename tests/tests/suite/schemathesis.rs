//! The document holds against the service: schemathesis runs every check
//! (`tests/schemathesis/run.sh`) against a fresh server in this run's mode and finds
//! nothing. The suite's run is the short one (`ST_EXAMPLES`, 10 examples per operation by
//! default, a fixed seed so CI is reproducible); `ST_EXAMPLES=200` without a seed is the
//! long run by hand.
use std::path::Path;

#[test]
fn schemathesis_finds_no_failure_with_every_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut cmd = tests::partner_shell(
        &root.join("tests/schemathesis/run.sh"),
        &["CARGO_TARGET_DIR", "ST_EXAMPLES", "ST_SEED"],
    );
    if std::env::var_os("ST_EXAMPLES").is_none() {
        cmd.env("ST_EXAMPLES", "10").env("ST_SEED", "20261127");
    }
    if tests::mode() == tests::Mode::Production {
        for k in ["WALLET_TEST_DATABASE_URL", "WALLET_TEST_REDIS_URL"] {
            cmd.env(k, std::env::var(k).expect("production mode has its URLs"));
        }
        // The scaled mode's Redis is a cluster (its seeds in WALLET_TEST_REDIS_URL).
        if let Ok(m) = std::env::var("WALLET_TEST_REDIS_MODE") {
            cmd.env("WALLET_TEST_REDIS_MODE", m);
        }
    }
    let out = cmd.output().expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: String = {
        let lines: Vec<&str> = stdout.lines().collect();
        lines[lines.len().saturating_sub(200)..].join("\n")
    };
    assert!(out.status.success(), "{tail}\n{stderr}");
    assert!(stdout.contains(" passed"), "a summary:\n{tail}");
}
