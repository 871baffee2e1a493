//! The README's "First sandbox payment" runs as written: `tests/quickstart.sh` takes its
//! shell blocks from README.md and runs them against a fresh embedded server; every command
//! must succeed, the payment's and the refund's webhooks must reach the example receiver,
//! and the event feed must list the payment.
use std::path::Path;

#[test]
fn the_readme_quickstart_runs_as_written_from_tenant_to_refund_and_webhook() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut cmd = tests::partner_shell(&root.join("tests/quickstart.sh"), &[]);
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
