//! Typed clients generated from the live document work: the TypeScript types from
//! openapi-typescript (with openapi-fetch) compile under `tsc --strict`, the Python package
//! from openapi-python-client (every operation generated) passes `mypy --strict`, and each
//! carries the quickstart's flow (merchant key, terminal token, enrollment, SKU top-up,
//! identify, QR, payment, refund) against a running service. A document that misstates a
//! path, a parameter, a body or a response breaks the generation, the check or the run.
use std::path::Path;

use serde_json::Value;
use tests::{
    TestApp,
    procs::{run_ok, tool},
};

/// Runs a client's flow against a fresh service and sandbox tenant, and checks what it
/// printed: the balance before, the payment, the refund and the balance after.
async fn run_flow(mut client: tokio::process::Command) {
    let app = TestApp::spawn_with_workers().await;
    let t = app.tenant(true).await;
    let out = client
        .env("WALLET", &app.url)
        .env("PLATFORM_KEY", &t.platform_key)
        .env("MERCHANT_ID", t.merchant_id.to_string())
        .output()
        .await
        .expect("the client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_flow(&stdout);
    app.stop().await;
}

fn assert_flow(stdout: &str) {
    let r: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(r["payment_status"], "completed", "{r}");
    assert_eq!(r["balance_before_minor"], 2000, "{r}");
    assert_eq!(r["refunded_minor"], 100, "{r}");
    assert_eq!(r["balance_after_minor"], 1850, "{r}");
}

#[tokio::test]
async fn a_typescript_client_generated_from_the_document_compiles_strictly_and_pays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript");
    let doc = api::http::openapi::build().json;
    // npm and tsc block: off the runtime, before the service runs on it.
    let d = dir.clone();
    tokio::task::spawn_blocking(move || {
        std::fs::write(d.join("openapi.json"), doc).unwrap();
        run_ok(
            tool("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&d),
            "npm ci (tests/clients/typescript)",
        );
        run_ok(
            tool("npm").args(["run", "-s", "generate"]).current_dir(&d),
            "openapi-typescript",
        );
        run_ok(
            tool("npx").args(["tsc", "-p", "."]).current_dir(&d),
            "tsc --strict",
        );
    })
    .await
    .unwrap();

    let mut node = tokio::process::Command::new("node");
    node.arg(dir.join("dist/quickstart.js"));
    run_flow(node).await;
}

#[tokio::test]
async fn a_python_client_generated_from_the_document_has_every_operation_type_checks_and_pays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let doc = api::http::openapi::build();
    let ops = doc.operations.len();
    let work = std::env::temp_dir().join(format!("wallet-pyclient-{}", uuid::Uuid::new_v4()));
    let w = work.clone();
    let r = root.clone();
    let json = doc.json.clone();
    // pip, the generator and mypy block: off the runtime, before the service runs on it.
    let python = tokio::task::spawn_blocking(move || {
        let venv = tool("bash")
            .arg(r.join("tests/venv.sh"))
            .output()
            .expect("tests/venv.sh runs");
        assert!(
            venv.status.success(),
            "{}",
            String::from_utf8_lossy(&venv.stderr)
        );
        let venv = Path::new(String::from_utf8_lossy(&venv.stdout).trim()).to_path_buf();
        std::fs::create_dir_all(&w).unwrap();
        std::fs::write(w.join("openapi.json"), json).unwrap();
        let out = tool(venv.join("bin/openapi-python-client"))
            .args(["generate", "--path", "openapi.json", "--meta", "none"])
            .args(["--output-path", "wallet_client"])
            .current_dir(&w)
            .output()
            .expect("openapi-python-client runs");
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A schema it cannot read is dropped with its operations, and said so.
        assert!(!said.contains("Unable to process"), "{said}");
        let generated = walk(&w.join("wallet_client/api"))
            .into_iter()
            .filter(|f| f.extension().is_some_and(|e| e == "py"))
            .filter(|f| f.file_name().is_some_and(|n| n != "__init__.py"))
            .count();
        assert_eq!(generated, ops, "one module per operation of the document");
        std::fs::copy(
            r.join("tests/clients/python/quickstart.py"),
            w.join("quickstart.py"),
        )
        .unwrap();
        run_ok(
            tool(venv.join("bin/python"))
                .args([
                    "-m",
                    "mypy",
                    "--strict",
                    "--no-incremental",
                    "quickstart.py",
                ])
                .current_dir(&w),
            "mypy --strict (the quickstart flow and the generated client)",
        );
        venv.join("bin/python")
    })
    .await
    .unwrap();

    let mut py = tokio::process::Command::new(python);
    py.arg("quickstart.py").current_dir(&work);
    run_flow(py).await;
    let _ = std::fs::remove_dir_all(&work);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
