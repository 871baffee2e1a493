//! The `wallet-api` command line, run as the operator runs it.
use std::process::Command;

use tests::{TestApp, against_this_run, send, test_config};

fn wallet_api() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wallet-api"))
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
fn a_transaction_pooler_without_a_direct_url_is_refused_by_name() {
    let run = |pooler: &str| {
        wallet_api()
            .arg("migrate")
            .env(
                "WALLET_DATABASE_URL",
                "postgres://postgres@127.0.0.1:1/none",
            )
            .env("WALLET_DATABASE_POOLER", pooler)
            .env_remove("WALLET_DATABASE_DIRECT_URL")
            .output()
            .expect("wallet-api runs")
    };
    let out = run("transaction");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WALLET_DATABASE_DIRECT_URL"), "{err}");
    let out = run("session");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WALLET_DATABASE_POOLER"), "{err}");
}

#[test]
fn redis_cluster_settings_are_checked_at_start_up_by_name() {
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = wallet_api();
        cmd.arg("migrate")
            .env(
                "WALLET_DATABASE_URL",
                "postgres://postgres@127.0.0.1:1/none",
            )
            .env_remove("WALLET_REDIS_URL")
            .env_remove("WALLET_REDIS_MODE")
            .env_remove("WALLET_REDIS_PREFIX");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("wallet-api runs");
        assert!(!out.status.success(), "{vars:?} was accepted");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let seeds = "redis://127.0.0.1:1,redis://127.0.0.1:2";
    // Several servers are a cluster's seeds: standalone mode cannot use them.
    let err = run(&[("WALLET_REDIS_URL", seeds)]);
    assert!(
        err.contains("WALLET_REDIS_URL") && err.contains("WALLET_REDIS_MODE=cluster"),
        "{err}"
    );
    let err = run(&[("WALLET_REDIS_MODE", "cluster")]);
    assert!(err.contains("WALLET_REDIS_MODE"), "{err}");
    let err = run(&[
        ("WALLET_REDIS_URL", "redis://127.0.0.1:1,http://x"),
        ("WALLET_REDIS_MODE", "cluster"),
    ]);
    assert!(
        err.contains("WALLET_REDIS_URL") && err.contains("each seed node"),
        "{err}"
    );
    // A brace in the namespace would be read as a hash tag.
    let err = run(&[
        ("WALLET_REDIS_URL", seeds),
        ("WALLET_REDIS_MODE", "cluster"),
        ("WALLET_REDIS_PREFIX", "w{1}:"),
    ]);
    assert!(err.contains("WALLET_REDIS_PREFIX"), "{err}");
    let err = run(&[("WALLET_REDIS_MODE", "sentinel")]);
    assert!(err.contains("WALLET_REDIS_MODE"), "{err}");
}

#[test]
fn a_cell_name_that_cannot_go_into_a_key_is_refused_at_start_up() {
    for bad in ["C7", "c-7", "toolongxx", ""] {
        let out = wallet_api()
            .arg("migrate")
            .env(
                "WALLET_DATABASE_URL",
                "postgres://postgres@127.0.0.1:1/none",
            )
            .env("WALLET_REDIS_URL", "redis://127.0.0.1:1")
            .env("WALLET_CELL", bad)
            .output()
            .expect("wallet-api runs");
        assert!(!out.status.success(), "{bad:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("WALLET_CELL"), "{bad:?}: {err}");
    }
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

/// Starts `wallet-api serve` against this run's database with JSON logs at debug level;
/// returns the child and its base URL.
fn serve_with_json_logs(log: &std::path::Path) -> (std::process::Child, String) {
    serve_with_logs(log, "json")
}

fn serve_with_logs(log: &std::path::Path, format: &str) -> (std::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = std::fs::File::create(log).unwrap();
    let child = against_this_run(wallet_api())
        .arg("serve")
        .env("WALLET_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("WALLET_METRICS_LISTEN_ADDR", "127.0.0.1:0")
        .env("WALLET_LOG_FORMAT", format)
        .env("WALLET_RUN_WORKERS", "false")
        .env("WALLET_BCRYPT_COST", "10")
        .env("RUST_LOG", "debug")
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("wallet-api serve starts");
    (child, format!("http://127.0.0.1:{port}/v1"))
}

/// Waits (up to 20 s) until the server at `url` answers.
async fn wait_until_up(client: &reqwest::Client, url: &str) {
    let started = std::time::Instant::now();
    while client.get(format!("{url}/health")).send().await.is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "server did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Human-readable logs are for a terminal: written to a file (or a pipe) they carry no
/// colour codes, which would litter every log viewer.
#[tokio::test]
async fn pretty_logs_written_to_a_file_carry_no_colour_codes() {
    let log = std::env::temp_dir().join(format!("wallet-log-{}.txt", uuid::Uuid::new_v4()));
    let (mut child, url) = serve_with_logs(&log, "pretty");
    let client = reqwest::Client::new();
    wait_until_up(&client, &url).await;
    let text = tests::eventually(
        std::time::Duration::from_secs(10),
        "the request's log line",
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("response").then_some(text)
        },
    )
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&log);
    assert!(
        !text.contains('\u{1b}'),
        "an escape code in the log file:\n{text}"
    );
    assert!(
        !text.trim_start().starts_with('{'),
        "pretty is not JSON:\n{text}"
    );
}

#[tokio::test]
async fn logs_are_json_with_the_request_id_and_never_contain_a_key_or_secret() {
    let log = std::env::temp_dir().join(format!("wallet-log-{}.jsonl", uuid::Uuid::new_v4()));
    let (mut child, url) = serve_with_json_logs(&log);
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let client = reqwest::Client::new();
    wait_until_up(&client, &url).await;
    let caps = client
        .get(format!("{url}/capabilities"))
        .header("x-api-key", &t.platform_key)
        .send()
        .await
        .unwrap();
    assert_eq!(caps.status(), 200);
    let request_id = caps.headers()["x-request-id"].to_str().unwrap().to_string();
    let created: serde_json::Value = client
        .post(format!("{url}/auth/keys"))
        .header("x-api-key", &t.platform_key)
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .json(&serde_json::json!({
            "meta": {"partner_request_id": uuid::Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
            "context": {"merchant_id": t.merchant_id.to_string()},
            "enterprise_id": t.merchant_id.to_string(),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let new_key = created["data"]["raw_key"]
        .as_str()
        .expect("a key was created")
        .to_string();
    let token: serde_json::Value = client
        .post(format!("{url}/auth/token"))
        .header("x-api-key", &new_key)
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .json(&serde_json::json!({
            "meta": {"partner_request_id": uuid::Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
            "context": {"merchant_id": t.merchant_id.to_string()},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let jwt = token["data"]["token"]
        .as_str()
        .expect("a token was minted")
        .to_string();
    let _ = child.kill();
    let _ = child.wait();

    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let cfg = test_config();
    for secret in [
        t.platform_key.as_str(),
        new_key.as_str(),
        jwt.as_str(),
        cfg.jwt_secret.as_ref().unwrap().expose(),
        cfg.secret_key.as_ref().unwrap().expose(),
    ] {
        assert!(!text.contains(secret), "a secret reached the log");
    }
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("every log line is JSON"))
        .collect();
    let of_request: Vec<_> = lines
        .iter()
        .filter(|l| l.to_string().contains(&request_id))
        .collect();
    assert!(
        !of_request.is_empty(),
        "the capabilities request is logged with its request id"
    );
}

#[tokio::test]
async fn ledger_check_passes_on_real_payments_and_fails_naming_a_tampered_wallet() {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let app = TestApp::spawn().await;
    let shop = tests::shop::Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    assert_eq!(shop.pay(&c, 120).await.status, 200);
    let check = || {
        against_this_run(wallet_api())
            .args([
                "ledger",
                "check",
                "--merchant",
                &shop.merchant().to_string(),
                "--json",
            ])
            .output()
            .expect("wallet-api runs")
    };
    let out = check();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without --json the same report is a table an operator reads.
    let human = against_this_run(wallet_api())
        .args([
            "ledger",
            "check",
            "--merchant",
            &shop.merchant().to_string(),
        ])
        .output()
        .expect("wallet-api runs");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.starts_with("FIELD"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("wallet_mismatches ") && l.ends_with(" none")),
        "{text}"
    );
    // Each run is recorded: the console's health page says when it last ran.
    let f = api::store::credentials::operators::AuditFilter {
        action: Some("ledger.check".into()),
        target_id: Some(shop.merchant().to_string()),
        ..Default::default()
    };
    let last = api::store::credentials::operators::audit_page(&app.server.state.db, &f, None, 1)
        .await
        .unwrap()
        .pop()
        .expect("a recorded check");
    assert!(last.actor.starts_with("cli:"), "{}", last.actor);
    assert_eq!(last.details["consistent"], true);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["postings"].as_i64().unwrap() >= 2, "{report}");

    // A balance column changed behind the ledger's back is caught.
    let db = &app.server.state.db;
    let backend = db.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => "UPDATE wallets SET actual_minor = actual_minor + 1 WHERE id = $1",
        _ => "UPDATE wallets SET actual_minor = actual_minor + 1 WHERE id = ?",
    };
    let id = uuid::Uuid::parse_str(&c.wallet_id).unwrap();
    db.execute_raw(Statement::from_sql_and_values(backend, sql, [id.into()]))
        .await
        .unwrap();
    let out = check();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a tampered balance fails the check"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["wallet_mismatches"][0]["id"],
        c.wallet_id.as_str(),
        "{report}"
    );
    assert_eq!(report["wallet_mismatches"][0]["stored_minor"], 381);
    assert_eq!(report["wallet_mismatches"][0]["ledger_minor"], 380);
}

/// `wallet-api openapi | head`: the reader closes the pipe after a few bytes of a document
/// far larger than the pipe holds; the command ends with success and says nothing.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::io::Read;
    let mut child = wallet_api()
        .arg("openapi")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("wallet-api runs");
    let mut head = [0u8; 64];
    child
        .stdout
        .take()
        .expect("stdout piped")
        .read_exact(&mut head)
        .expect("the document starts");
    // The read end is dropped here, as `head` closes it.
    let out = child.wait_with_output().expect("wallet-api ends");
    assert!(head.starts_with(b"{"));
    assert!(out.status.success(), "exit {:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// `ledger check` where no service runs names the database it looked for and the settings,
/// and creates nothing.
#[test]
fn ledger_check_without_the_services_database_says_where_it_looked() {
    let (out, dir) =
        tests::procs::run_in_empty_dir(env!("CARGO_BIN_EXE_wallet-api"), &["ledger", "check"], &[]);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("wallet-data/wallet.db") && said.contains("WALLET_DATABASE_URL"),
        "{said}"
    );
    assert!(!said.contains("no such table"), "{said}");
    assert!(!dir.join("wallet-data").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn migrate_says_how_many_migrations_it_applied_and_that_the_schema_is_current() {
    // Embedded mode in an empty directory: a fresh SQLite file, then the same file again
    // (what an operator checks on a restored database: nothing left to apply).
    let dir =
        std::env::temp_dir().join(format!("wallet-migrate-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_wallet-api"))
            .arg("migrate")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("WALLET_DATA_DIR", &dir)
            .output()
            .expect("wallet-api runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let known = <migration::Migrator as migration::MigratorTrait>::migrations().len();
    let first = run();
    assert!(
        first.contains(&format!(
            "migrations applied: {known} of {known}; the schema is current"
        )),
        "{first}"
    );
    let again = run();
    assert!(
        again.contains(&format!(
            "migrations applied: 0 of {known}; the schema is current"
        )),
        "{again}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
