//! The README's "First sandbox payment" runs as written: `tests/quickstart.sh` takes its
//! shell blocks from README.md and runs them against a fresh embedded server; every command
//! must succeed, the payment's and the refund's webhooks must reach the example receiver,
//! and the event feed must list the payment.
use std::{path::Path, process::Command};

#[test]
fn the_readme_quickstart_runs_as_written_from_tenant_to_refund_and_webhook() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // A partner's shell, not this test's: cargo sets variables for a running test (and
    // build scripts read some), and a nested `cargo run` that saw them would rebuild the
    // dependencies the suite just built.
    let keep = [
        "PATH",
        "HOME",
        "USER",
        "TMPDIR",
        "LANG",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
    ];
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("tests/quickstart.sh")).env_clear();
    for (k, v) in std::env::vars_os() {
        if keep.iter().any(|x| k == *x) || k.to_string_lossy() == "CARGO_HOME" {
            cmd.env(k, v);
        }
    }
    let out = cmd.output().expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in [
        r#""outcome": "processed""#,
        r#""event_type": "payment.completed""#,
        r#""event_type": "payment.refunded""#,
        "every command succeeded",
    ] {
        assert!(stdout.contains(line), "{line} in:\n{stdout}");
    }
}
