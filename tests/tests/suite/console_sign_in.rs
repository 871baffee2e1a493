//! Signing in as an operator, at the console's form and with `x-operator-key`, against a
//! guesser: failed sign-ins are counted per client address and per key prefix and refused
//! with 429 and `Retry-After` past the budget, every failure is audited (never with the
//! key), a sign-in form is good for one submission, and sessions end on the server when
//! the operator signs out or is disabled or enabled.
use reqwest::{Client, StatusCode, redirect::Policy};
use serde_json::Value;
use tests::TestApp;
use uuid::Uuid;

/// The sign-in budget of these tests' apps (the suite's others effectively have none).
const FAILURES_PER_CLIENT: u64 = 10;
const FAILURES_PER_PREFIX: u64 = 5;

/// An app with the default sign-in budget.
async fn app() -> TestApp {
    TestApp::spawn_with(false, |cfg| {
        let defaults = api::config::Config::default();
        cfg.ops_sign_in_failures_per_client = defaults.ops_sign_in_failures_per_client;
        cfg.ops_sign_in_failures_per_prefix = defaults.ops_sign_in_failures_per_prefix;
        assert_eq!(
            (
                cfg.ops_sign_in_failures_per_client,
                cfg.ops_sign_in_failures_per_prefix
            ),
            (FAILURES_PER_CLIENT, FAILURES_PER_PREFIX)
        );
    })
    .await
}

/// A client address of this test's own (any 127.0.0.0/8 address is this host), so that the
/// failures it counts are its alone: the suite's other tests come from 127.0.0.1.
fn own_address() -> std::net::IpAddr {
    let b = Uuid::new_v4().into_bytes();
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, b[0] | 1, b[1], b[2].max(2)))
}

async fn operator(app: &TestApp) -> api::domain::operators::OperatorCreated {
    api::domain::operators::create(&app.server.state.db, "sign-in test", 10)
        .await
        .unwrap()
}

/// A form's fields as `application/x-www-form-urlencoded`.
fn urlencoded(fields: &[(&str, &str)]) -> String {
    let mut u = reqwest::Url::parse("http://form/").unwrap();
    u.query_pairs_mut().extend_pairs(fields);
    u.query().unwrap_or_default().to_string()
}

/// A browser at `from`.
fn browser_at(from: std::net::IpAddr) -> Client {
    Client::builder()
        .redirect(Policy::none())
        .local_address(from)
        .build()
        .unwrap()
}

/// A browser at an address of its own, and that address as the service sees it.
fn browser() -> (Client, String) {
    let from = own_address();
    (browser_at(from), from.to_string())
}

/// The `name="csrf"` value of a page's first form.
fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\"").expect("a form with a token");
    let rest = &html[at..];
    let v = &rest[rest.find("value=\"").unwrap() + 7..];
    v[..v.find('"').unwrap()].to_string()
}

fn cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
}

/// A fresh sign-in form: its token and its cookie.
async fn form(app: &TestApp, c: &Client) -> (String, String) {
    let r = c
        .get(format!("{}/ops/login", app.server.url()))
        .send()
        .await
        .unwrap();
    let login = cookie(&r, "ops_login").expect("the form's cookie");
    (csrf_of(&r.text().await.unwrap()), login)
}

async fn submit(
    app: &TestApp,
    c: &Client,
    (token, login): &(String, String),
    key: &str,
) -> reqwest::Response {
    c.post(format!("{}/ops/login", app.server.url()))
        .header("cookie", format!("ops_login={login}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(urlencoded(&[
            ("csrf", token.as_str()),
            ("operator_key", key),
        ]))
        .send()
        .await
        .unwrap()
}

/// Signs in with `key`; the session cookie.
async fn sign_in(app: &TestApp, c: &Client, key: &str) -> String {
    let r = submit(app, c, &form(app, c).await, key).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    cookie(&r, "ops_session").expect("a session cookie")
}

async fn page(app: &TestApp, session: &str, path: &str) -> reqwest::Response {
    browser()
        .0
        .get(format!("{}{path}", app.server.url()))
        .header("cookie", format!("ops_session={session}"))
        .send()
        .await
        .unwrap()
}

/// Whether `session` still opens the console.
async fn opens(app: &TestApp, session: &str) -> bool {
    page(app, session, "/ops/dead-letters").await.status() == StatusCode::OK
}

/// The audit entries of `action`, newest first, that `pick` keeps (the suite's tests share
/// one audit log).
async fn audit_of(
    app: &TestApp,
    action: &str,
    pick: impl Fn(&entities::operator_audit::Model) -> bool,
) -> Vec<entities::operator_audit::Model> {
    let f = api::store::credentials::operators::AuditFilter {
        action: Some(action.to_string()),
        ..Default::default()
    };
    api::store::credentials::operators::audit_page(&app.server.state.db, &f, None, 200)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| pick(e))
        .collect()
}

/// The audit entries of `action` about attempts from `from`.
async fn audited(app: &TestApp, action: &str, from: &str) -> Vec<entities::operator_audit::Model> {
    audit_of(app, action, |e| e.details["client"] == from).await
}

/// The audit entries of `action` by or about operator `op`.
async fn audited_by(
    app: &TestApp,
    action: &str,
    op: uuid::Uuid,
) -> Vec<entities::operator_audit::Model> {
    let id = op.to_string();
    audit_of(app, action, |e| {
        e.actor.contains(&id) || e.target_id.as_deref() == Some(id.as_str())
    })
    .await
}

fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn wrong_keys_at_the_console_are_throttled_per_address_and_audited_without_the_key() {
    let app = app().await;
    let op = operator(&app).await;
    let (c, from) = browser();
    let wrong = format!("wo_{}", "x".repeat(36));
    for i in 0..FAILURES_PER_CLIENT {
        let r = submit(&app, &c, &form(&app, &c).await, &wrong).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    // Past the budget: refused before the key is read, the right key included.
    for key in [wrong.as_str(), op.operator_key.as_str()] {
        let r = submit(&app, &c, &form(&app, &c).await, key).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        let secs = retry_after(&r);
        assert!(secs > 0 && secs <= 15 * 60, "{secs}");
    }
    let failures = audited(&app, "operator.sign_in_failed", &from).await;
    assert_eq!(failures.len() as u64, FAILURES_PER_CLIENT);
    for f in &failures {
        assert_eq!(f.details["surface"], "console");
        assert_eq!(f.details["reason"], "unknown_key");
        let text = serde_json::to_string(&f.details).unwrap();
        assert!(!text.contains(&wrong) && !text.contains(&op.operator_key));
    }
    assert_eq!(failures[0].details["locked"], serde_json::json!(["client"]));
}

#[tokio::test]
async fn wrong_operator_keys_on_the_api_are_throttled_per_key_prefix_but_not_the_proven_key() {
    let app = app().await;
    let op = operator(&app).await;
    let (c, from) = browser();
    let call = |key: String| {
        let (app, c) = (&app, &c);
        async move {
            c.get(format!("{}/operator/dead-letters", app.url))
                .header("x-operator-key", key)
                .send()
                .await
                .unwrap()
        }
    };
    // The holder signs in once: its key is proven.
    assert_eq!(call(op.operator_key.clone()).await.status(), 200);
    // Guesses at the holder's key prefix, fewer than this address may make.
    let key = &op.operator_key;
    let prefix = &key[..key.len() - 28];
    let guess = format!("{prefix}{}", "A".repeat(28));
    const { assert!(FAILURES_PER_PREFIX < FAILURES_PER_CLIENT) };
    for _ in 0..FAILURES_PER_PREFIX {
        assert_eq!(call(guess.clone()).await.status(), 401);
    }
    let refused = call(guess.clone()).await;
    assert_eq!(refused.status(), 429);
    assert!(retry_after(&refused) > 0);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "RATE_LIMITED");
    // The proven key is not locked out by the flood at its prefix.
    assert_eq!(call(key.clone()).await.status(), 200);
    let failures = audited(&app, "operator.sign_in_failed", &from).await;
    assert_eq!(failures.len() as u64, FAILURES_PER_PREFIX);
    assert!(
        failures
            .iter()
            .all(|f| f.details["surface"] == "api" && f.details["key_prefix"] == prefix)
    );
    assert_eq!(failures[0].details["locked"], serde_json::json!(["prefix"]));
}

#[tokio::test]
async fn a_sign_in_form_is_good_for_one_submission() {
    let app = app().await;
    let op = operator(&app).await;
    let (c, from) = browser();
    let used = form(&app, &c).await;
    assert_eq!(
        submit(&app, &c, &used, "wo_not_a_key").await.status(),
        StatusCode::UNAUTHORIZED
    );
    // The same token again, even with the right key: the form is stale.
    let again = submit(&app, &c, &used, &op.operator_key).await;
    assert_eq!(again.status(), StatusCode::FORBIDDEN);
    assert!(cookie(&again, "ops_session").is_none());
    let stale = audited(&app, "operator.sign_in_failed", &from).await;
    assert_eq!(stale[0].details["reason"], "stale_form");
    // A fresh form signs in.
    sign_in(&app, &c, &op.operator_key).await;
}

#[tokio::test]
async fn signing_out_ends_the_session_on_the_server_and_a_forged_post_is_audited() {
    let app = app().await;
    let op = operator(&app).await;
    let (c, from) = browser();
    let session = sign_in(&app, &c, &op.operator_key).await;
    assert!(opens(&app, &session).await);

    // A post without this session's token changes nothing and is audited.
    let forged = c
        .post(format!("{}/ops/health/ledger-check", app.server.url()))
        .header("cookie", format!("ops_session={session}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(urlencoded(&[("csrf", "forged")]))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let refused = audited(&app, "console.csrf_refused", &from).await;
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].details["path"], "/ops/health/ledger-check");
    assert!(
        audited_by(&app, "ledger.check", op.operator_id)
            .await
            .is_empty()
    );

    let token = csrf_of(
        &page(&app, &session, "/ops/dead-letters")
            .await
            .text()
            .await
            .unwrap(),
    );
    let out = c
        .post(format!("{}/ops/logout", app.server.url()))
        .header("cookie", format!("ops_session={session}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(urlencoded(&[("csrf", token.as_str())]))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    // The cookie kept by a copy of the browser no longer opens anything.
    assert!(!opens(&app, &session).await);
    assert_eq!(
        audited_by(&app, "console.sign_out", op.operator_id)
            .await
            .len(),
        1
    );
}

#[tokio::test]
async fn disabling_or_enabling_an_operator_ends_every_session_it_had() {
    let app = app().await;
    let op = operator(&app).await;
    let (c, from) = browser();
    let (first, second) = (
        sign_in(&app, &c, &op.operator_key).await,
        sign_in(&app, &c, &op.operator_key).await,
    );
    let cli = |action: &str| {
        let mut cmd = std::process::Command::new(tests::procs::binary("wallet-api"));
        cmd.args(["operator", action, "--id", &op.operator_id.to_string()])
            .args(["--reason", "left the team", "--json"]);
        let mut cmd = tests::against_this_run(cmd);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let disabled = cli("disable");
    assert_eq!(disabled["status"], "inactive");
    assert_eq!(disabled["sessions_ended"], 2);
    assert!(!opens(&app, &first).await && !opens(&app, &second).await);

    // A disabled operator's key is refused, and the attempt audited as its own.
    let r = submit(&app, &c, &form(&app, &c).await, &op.operator_key).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let failed = audited(&app, "operator.sign_in_failed", &from).await;
    assert_eq!(failed[0].details["reason"], "operator_disabled");
    assert_eq!(failed[0].target_id, Some(op.operator_id.to_string()));

    // Enabled again, the old cookies stay dead; a new sign-in works.
    assert_eq!(cli("enable")["status"], "active");
    assert!(!opens(&app, &first).await);
    let fresh = sign_in(&app, &c, &op.operator_key).await;
    assert!(opens(&app, &fresh).await);
    assert_eq!(
        audited_by(&app, "operator.disable", op.operator_id)
            .await
            .len(),
        1
    );
}
