//! The `wallet-api` command line, run as the operator runs it.
use std::process::Command;

use tests::{TestApp, send, test_config};

fn wallet_api() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wallet-api"))
}

/// Points the command at this test run's database (and Redis, in production mode).
fn against_this_run(mut cmd: Command) -> Command {
    let cfg = test_config();
    cmd.env("WALLET_DATABASE_URL", cfg.database_url.as_deref().unwrap())
        .env("WALLET_DATA_DIR", &cfg.data_dir)
        .env(
            "WALLET_JWT_SECRET",
            cfg.jwt_secret.as_ref().unwrap().expose(),
        )
        .env(
            "WALLET_SECRET_KEY",
            cfg.secret_key.as_ref().unwrap().expose(),
        )
        .env(
            "WALLET_REDIS_URL",
            cfg.redis_url
                .unwrap_or_else(|| "redis://127.0.0.1:6379".into()),
        );
    cmd
}

#[tokio::test]
async fn tenant_create_prints_the_documented_object_and_its_key_works_at_once() {
    let out = against_this_run(wallet_api())
        .args([
            "tenant",
            "create",
            "--name",
            "Corner Shop",
            "--sandbox",
            "--currency",
            "GBP",
            "--branches",
            "3",
            "--json",
        ])
        .env("WALLET_BCRYPT_COST", "10")
        .output()
        .expect("wallet-api runs");
    assert!(
        out.status.success(),
        "tenant create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    for key in [
        "integration_id",
        "merchant_id",
        "enterprise_id",
        "brand_id",
        "branch_ids",
        "wallet_program_id",
        "currency",
        "platform_key",
        "is_sandbox",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(
        v.as_object().unwrap().len(),
        9,
        "exactly the documented fields: {v}"
    );
    assert_eq!(v["merchant_id"], v["enterprise_id"]);
    assert_eq!(v["branch_ids"].as_array().unwrap().len(), 3);
    assert_eq!(v["currency"], "GBP");
    assert_eq!(v["is_sandbox"], true);
    assert!(v["platform_key"].as_str().unwrap().starts_with("wk_test_"));

    let app = TestApp::spawn().await;
    let r = send(
        app.get("/capabilities")
            .header("x-api-key", v["platform_key"].as_str().unwrap()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"]["credential"]["integration_id"],
        v["integration_id"]
    );
    assert_eq!(r.body["data"]["currencies"], serde_json::json!(["GBP"]));
}

#[tokio::test]
async fn tenant_create_rejects_a_bad_currency_and_names_the_flag() {
    let out = against_this_run(wallet_api())
        .args([
            "tenant",
            "create",
            "--name",
            "X",
            "--currency",
            "EURO",
            "--json",
        ])
        .output()
        .expect("wallet-api runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--currency"));
    assert!(out.stdout.is_empty());
}

#[test]
fn openapi_prints_the_served_document() {
    let out = wallet_api()
        .arg("openapi")
        .output()
        .expect("wallet-api runs");
    assert!(out.status.success());
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, api::http::openapi::build().document);
}

#[test]
fn a_bad_setting_stops_start_up_with_its_name() {
    let out = wallet_api()
        .arg("migrate")
        .env("WALLET_DATABASE_URL", "mysql://nope")
        .output()
        .expect("wallet-api runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("WALLET_DATABASE_URL"));
}

#[test]
fn production_mode_refuses_to_start_without_a_jwt_secret() {
    let out = wallet_api()
        .arg("serve")
        .env(
            "WALLET_DATABASE_URL",
            "postgres://postgres@127.0.0.1:1/none",
        )
        .env("WALLET_REDIS_URL", "redis://127.0.0.1:1")
        .env_remove("WALLET_JWT_SECRET")
        .output()
        .expect("wallet-api runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("WALLET_JWT_SECRET"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_misspelt_setting_is_refused_not_ignored() {
    let out = wallet_api()
        .arg("migrate")
        .env("WALLET_DATABSE_URL", "postgres://x")
        .output()
        .expect("wallet-api runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("WALLET_DATABSE_URL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
