//! Typed clients generated from the live document work: the TypeScript types from
//! openapi-typescript (with openapi-fetch) compile under `tsc --strict` and carry the
//! quickstart's flow (merchant key, terminal token, enrollment, SKU top-up, identify, QR,
//! payment, refund) against a running service. A document that misstates a path, a
//! parameter, a body or a response breaks the compile or the run.
use std::{path::Path, process::Command};

use serde_json::Value;
use tests::{TestApp, procs::run_ok};

#[tokio::test]
async fn a_typescript_client_generated_from_the_document_compiles_strictly_and_pays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript");
    let doc = api::http::openapi::build().json;
    // npm and tsc block: off the runtime, before the service runs on it.
    let d = dir.clone();
    tokio::task::spawn_blocking(move || {
        std::fs::write(d.join("openapi.json"), doc).unwrap();
        run_ok(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&d),
            "npm ci (tests/clients/typescript)",
        );
        run_ok(
            Command::new("npm")
                .args(["run", "-s", "generate"])
                .current_dir(&d),
            "openapi-typescript",
        );
        run_ok(
            Command::new("npx").args(["tsc", "-p", "."]).current_dir(&d),
            "tsc --strict",
        );
    })
    .await
    .unwrap();

    let app = TestApp::spawn_with_workers().await;
    let t = app.tenant(true).await;
    let out = tokio::process::Command::new("node")
        .arg(dir.join("dist/quickstart.js"))
        .env("WALLET", &app.url)
        .env("PLATFORM_KEY", &t.platform_key)
        .env("MERCHANT_ID", t.merchant_id.to_string())
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(r["payment_status"], "completed", "{r}");
    assert_eq!(r["balance_before_minor"], 2000, "{r}");
    assert_eq!(r["refunded_minor"], 100, "{r}");
    assert_eq!(r["balance_after_minor"], 1850, "{r}");
    app.stop().await;
}
