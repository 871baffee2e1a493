//! The operations console (`/ops`), in a real browser: headless Chromium through
//! chromedriver. A test binary of its own, so the browser's load never overlaps the main
//! suite's timing-sensitive tests (cargo runs test binaries one after another). An operator signs in with the operator key, filters dead letters, opens
//! one, replays a filtered set after a dry run and finds it in the audit log; a partner
//! key, a form without its CSRF token and an expired session are refused. Each page is
//! photographed (`WALLET_CONSOLE_SCREENSHOTS=docs/console` refreshes the documentation's).
use chrono::Utc;
use fantoccini::cookies::Cookie;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, IntoActiveModel};
use serde_json::json;
use tests::{TestApp, browser::Browser, dead_letters, finance, send, shop::Shop};
use uuid::Uuid;

async fn operator(app: &TestApp, name: &str) -> api::domain::operators::OperatorCreated {
    api::domain::operators::create(
        &app.server.state.db,
        name,
        app.server.state.config.bcrypt_cost,
    )
    .await
    .unwrap()
}

async fn sign_in(b: &Browser, app: &TestApp, key: &str) {
    b.goto(&format!("{}/ops/login", app.server.url())).await;
    b.fill("input[name=operator_key]", key).await;
    b.click("form button[type=submit]").await;
}

#[tokio::test]
async fn an_operator_filters_opens_a_letter_and_replays_a_filtered_set_after_a_dry_run() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let op = operator(
        &app,
        &format!("Ana on call {}", &Uuid::new_v4().simple().to_string()[..6]),
    )
    .await;
    let phone = format!("+4915{:07}", Uuid::new_v4().as_u128() % 10_000_000);
    let mut gateway = vec![];
    for _ in 0..3 {
        gateway
            .push(dead_letters::dead_sms(&app, &t, &phone, "SMS gateway 503: upstream down").await);
    }
    let other = dead_letters::dead_sms(&app, &t, &phone, "invalid destination number").await;

    let b = Browser::start().await;
    b.goto(&format!("{}/ops/login", app.server.url())).await;
    b.screenshot("login").await;
    sign_in(&b, &app, &op.operator_key).await;
    assert_eq!(
        b.path().await,
        "/ops/dead-letters",
        "signed in, on the dead letters"
    );
    let cookie = b
        .client
        .get_named_cookie("ops_session")
        .await
        .expect("a session cookie");
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(format!("{:?}", cookie.same_site()), "Some(Strict)");

    // Filter: this merchant's letters whose error mentions the gateway.
    b.fill(
        "form.filters input[name=merchant]",
        &t.merchant_id.to_string(),
    )
    .await;
    b.fill("form.filters input[name=error]", "gateway").await;
    b.click("form.filters button[type=submit]").await;
    assert_eq!(b.count("table.letters tbody tr").await, 3);
    assert!(!b.text().await.contains("invalid destination"));
    b.screenshot("dead-letters").await;

    // One letter's whole story: attempts, and a payload with no secret in it.
    b.click("table.letters tbody tr a.id").await;
    let page = b.text().await;
    assert!(
        page.contains("Attempts") && page.contains("SMS gateway 503"),
        "{page}"
    );
    assert!(page.contains("[redacted]"), "{page}");
    assert!(!page.contains(&phone), "the phone number is not shown");
    b.screenshot("dead-letter").await;
    b.client.back().await.unwrap();

    // Dry run first: it says how many and which, and changes nothing.
    b.choose("form.action select[name=action]", "replay").await;
    b.fill(
        "form.action input[name=reason]",
        "INC-4242 SMS gateway restored",
    )
    .await;
    b.click("form.action button[type=submit]").await;
    let preview = b.text().await;
    assert!(
        preview.contains("Dry run: 3 dead letter(s) match"),
        "{preview}"
    );
    assert_eq!(b.count("table.letters tbody tr").await, 3);
    for id in &gateway {
        assert_eq!(dead_letters::status_of(&app, *id).await, "dead");
    }
    b.screenshot("dead-letters-bulk-preview").await;

    b.click("form.action button[type=submit]").await;
    let done = b.text().await;
    assert!(done.contains("3 matched: 3 replayed"), "{done}");
    for id in &gateway {
        assert_eq!(dead_letters::status_of(&app, *id).await, "replayed");
    }
    assert_eq!(
        dead_letters::status_of(&app, other).await,
        "dead",
        "outside the filter"
    );
    b.screenshot("dead-letters-bulk-done").await;

    // The audit log: the whole action under this operator, with its reason.
    b.click("header nav a[href='/ops/audit']").await;
    b.choose(
        "form.filters select[name=actor]",
        &format!("operator:{}:{}", op.operator_id, op.name),
    )
    .await;
    b.choose(
        "form.filters select[name=action]",
        "dead_letter.bulk_replay",
    )
    .await;
    b.click("form.filters button[type=submit]").await;
    assert_eq!(b.count("table.audit tbody tr").await, 1);
    assert!(b.text().await.contains("INC-4242 SMS gateway restored"));
    b.screenshot("audit").await;
    b.close().await;
}

#[tokio::test]
async fn a_partner_key_a_form_without_its_token_and_an_expired_session_are_refused() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let op = operator(&app, "Ben on call").await;
    let letter = dead_letters::dead_sms(&app, &t, "+4915100000077", "gateway down").await;
    let b = Browser::start().await;

    // A partner key does not open the console, typed in or sent as a header.
    sign_in(&b, &app, &t.platform_key).await;
    assert!(b.text().await.contains("That is not a valid operator key"));
    assert!(
        b.client.get_named_cookie("ops_session").await.is_err(),
        "no session"
    );
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = plain
        .get(format!("{}/ops/dead-letters", app.server.url()))
        .header("x-api-key", &t.platform_key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/ops/login");

    // A form posted without its CSRF token changes nothing.
    sign_in(&b, &app, &op.operator_key).await;
    b.goto(&format!("{}/ops/dead-letters/{letter}", app.server.url()))
        .await;
    b.client
        .execute(
            "document.querySelectorAll('form.action input[name=csrf]').forEach(e => e.remove())",
            vec![],
        )
        .await
        .unwrap();
    b.fill(
        "form.action[action$='/purge'] input[name=reason]",
        "no token",
    )
    .await;
    b.click("form.action[action$='/purge'] button[type=submit]")
        .await;
    assert!(b.text().await.contains("missing its security token"));
    assert_eq!(dead_letters::status_of(&app, letter).await, "dead");

    // A session past its expiry (signed by this server, so only the time is wrong) sends
    // the operator back to sign in.
    let expired = api::console::mint_session(
        &app.server.state.sealer,
        op.operator_id,
        Uuid::now_v7(),
        Utc::now() - chrono::Duration::seconds(1),
    );
    b.client.delete_all_cookies().await.unwrap();
    let c = Cookie::parse(format!(
        "ops_session={expired}; Path=/ops; Domain=127.0.0.1; SameSite=Strict; HttpOnly"
    ))
    .unwrap();
    b.client.add_cookie(c).await.unwrap();
    b.goto(&format!("{}/ops/dead-letters", app.server.url()))
        .await;
    assert_eq!(b.path().await, "/ops/login");
    assert!(b.text().await.contains("Your session expired"));
    b.close().await;
}

#[tokio::test]
async fn the_webhook_tenant_and_health_pages_show_and_act_for_an_operator() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let t = &shop.tenant;
    let op = operator(&app, "Cleo on call").await;
    let db = &app.server.state.db;

    // An endpoint the worker auto-disabled after a day of failures.
    let r = shop
        .control(
            "/webhooks/subscriptions",
            json!({"url": "https://pos.example.com/hooks/wallet", "description": "till events"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sub: Uuid = r.body["data"]["subscription"]["subscription_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut s = api::store::webhooks::find_subscription(db, sub)
        .await
        .unwrap()
        .unwrap()
        .into_active_model();
    s.state = Set(entities::webhook_subscription::SubscriptionState::Disabled);
    s.disabled_reason = Set(Some("failing".into()));
    s.disabled_at = Set(Some(Utc::now() - chrono::Duration::minutes(5)));
    s.failure_streak = Set(200);
    s.failing_since = Set(Some(Utc::now() - chrono::Duration::hours(24)));
    s.update(db).await.unwrap();
    for (i, (ok, code, ms)) in [
        (true, Some(200), 84),
        (false, Some(503), 10_000),
        (false, None, 10_000),
    ]
    .into_iter()
    .enumerate()
    {
        entities::webhook_attempt::ActiveModel {
            id: Set(Uuid::now_v7()),
            delivery_id: Set(Uuid::now_v7()),
            subscription_id: Set(sub),
            attempt: Set(i as i32 + 1),
            started_at: Set(Utc::now() - chrono::Duration::minutes(30 - i as i64)),
            status_code: Set(code),
            latency_ms: Set(ms),
            error: Set((!ok).then(|| {
                if code.is_some() {
                    "HTTP 503".to_string()
                } else {
                    "timed out after 10000 ms".to_string()
                }
            })),
            succeeded: Set(ok),
            next_retry_at: Set(None),
        }
        .insert(db)
        .await
        .unwrap();
    }

    let b = Browser::start().await;
    sign_in(&b, &app, &op.operator_key).await;
    b.goto(&format!(
        "{}/ops/webhooks?tenant={}",
        app.server.url(),
        t.integration_id
    ))
    .await;
    let page = b.text().await;
    assert!(page.contains("DISABLED (failing"), "{page}");
    assert!(page.contains("33.3% of 3 attempt(s) succeeded"), "{page}");
    assert!(page.contains("timed out after 10000 ms"), "{page}");
    assert!(page.contains("200 · failing since"), "{page}");
    b.screenshot("webhooks").await;
    b.fill(
        "form.action[action$='/enable'] input[name=reason]",
        "receiver fixed, INC-77",
    )
    .await;
    b.click("form.action[action$='/enable'] button[type=submit]")
        .await;
    assert!(b.text().await.contains("is ACTIVE again"));
    let s = api::store::webhooks::find_subscription(db, sub)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((s.state.as_str(), s.failure_streak), ("ACTIVE", 0));

    // Tenants: find this one, suspend it with a reason; its key stops working.
    b.goto(&format!(
        "{}/ops/tenants?q={}",
        app.server.url(),
        t.integration_id
    ))
    .await;
    assert_eq!(b.count("table.tenants tbody tr").await, 1);
    assert!(b.text().await.contains("sandbox"));
    b.screenshot("tenants").await;
    b.fill(
        "table.tenants form.action input[name=reason]",
        "fraud review FR-9",
    )
    .await;
    b.click("table.tenants form.action button[type=submit]")
        .await;
    assert!(b.text().await.contains("is SUSPENDED"));
    assert_eq!(tests::key_works(&app, &t.platform_key).await, 401);

    // Health: subsystems, outbox, queues, and a ledger check run from the page.
    b.goto(&format!("{}/ops/health", app.server.url())).await;
    b.click("form.action button[type=submit]").await;
    assert_eq!(b.path().await, "/ops/health");
    let page = b.text().await;
    assert!(page.contains("All subsystems answer"), "{page}");
    assert!(page.contains("Consistent:"), "{page}");
    assert!(page.contains("by operator:"), "{page}");
    b.screenshot("health").await;
    b.close().await;

    // Each action is in the audit log with the operator and the reason.
    let log = send(
        app.get(
            &format!(
                "/operator/audit-log?actor=operator:{}:{}",
                op.operator_id, op.name
            )
            .replace(' ', "%20"),
        )
        .header("x-operator-key", &op.operator_key),
    )
    .await;
    assert_eq!(log.status, 200, "{}", log.body);
    let actions: Vec<&str> = log.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for a in [
        "console.sign_in",
        "webhook_endpoint.enable",
        "integration.suspend",
        "ledger.check",
    ] {
        assert!(actions.contains(&a), "{a} in {actions:?}");
    }
}

#[tokio::test]
async fn the_liability_page_charts_a_merchants_daily_liability_and_lists_its_report_files() {
    let app = TestApp::spawn_with_workers().await;
    let op = operator(&app, "finance console").await;
    let shop = Shop::open(&app).await;
    // A week of a merchant's stored value on its test clock.
    let first = finance::clock_today(&shop).await;
    let a = shop.customer().await;
    let b_ = shop.customer().await;
    shop.fund(&a, 20_000).await;
    shop.grant(&a, 1_500, "RELEASED", 30 * 86_400).await;
    for day in 0..6 {
        finance::advance_days(&shop, 1).await;
        shop.fund(&b_, 2_000 + day * 500).await;
        assert_eq!(shop.pay(&a, 1_200 + day * 300).await.status, 200);
    }
    let last = finance::clock_today(&shop).await.pred_opt().unwrap();
    let run = finance::run_report(
        &shop,
        json!({"type": "liability_rollforward", "from": first.to_string(), "to": last.to_string()}),
    )
    .await;
    assert_eq!(run["status"], "succeeded", "{run}");

    let b = Browser::start().await;
    sign_in(&b, &app, &op.operator_key).await;
    b.goto(&format!(
        "{}/ops/liability?merchant={}&from={first}&to={last}",
        app.server.url(),
        shop.merchant()
    ))
    .await;
    assert_eq!(b.path().await, "/ops/liability");
    let page = b.text().await;
    assert!(page.contains("EUR: daily closing liability"), "{page}");
    assert_eq!(b.count("svg.chart").await, 1);
    assert_eq!(b.count("svg.chart polygon.band").await, 4);
    let days = (last - first).num_days() as usize + 1;
    assert_eq!(
        b.count("table tbody tr").await,
        days + 1,
        "a row a day, and the run"
    );
    assert_eq!(b.count("a[href^='/ops/reports/']").await, 1);
    b.screenshot("liability").await;
    b.close().await;

    // The figures are the endpoint's: the last day's liability, as the page shows it.
    let l = finance::liability_at(&shop, finance::end_of(last)).await;
    let total = l[0]["liability_minor"].as_i64().unwrap();
    let shown = format!("{}.{:02}", total / 100, total % 100);
    assert!(page.contains(&shown), "{shown} in {page}");
    app.stop().await;
}

/// The Risk page lists the terminal a guesser blocked, with its last attempts, and an
/// operator clears it with a reason: the till may enter codes again, and the audit log says
/// who and why.
#[tokio::test]
async fn the_risk_page_shows_a_blocked_terminal_and_clears_it() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let op = operator(&app, "Ravi on fraud").await;
    let guess = || shop.pay_with(json!({"type": "short_code", "short_code": "ZZZZ2"}), 10);
    for _ in 0..app.server.state.config.risk_terminal_failures {
        assert_eq!(guess().await.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED");
    }
    assert_eq!(guess().await.code(), "RATE_LIMITED");

    let b = Browser::start().await;
    sign_in(&b, &app, &op.operator_key).await;
    b.goto(&format!(
        "{}/ops/risk?merchant={}",
        app.server.url(),
        shop.merchant()
    ))
    .await;
    let page = b.text().await;
    assert!(
        page.contains("terminal {\"terminal_id\":\"till-1\"}"),
        "{page}"
    );
    assert!(page.contains("credential_failures"), "{page}");
    assert!(page.contains("short_code:req_"), "{page}");
    b.screenshot("risk").await;
    b.fill("form.action input[name=reason]", "cashier mistyped, INC-91")
        .await;
    b.click("form.action button[type=submit]").await;
    assert!(b.text().await.contains("may enter credentials again"));
    assert_eq!(guess().await.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED");
    b.goto(&format!("{}/ops/audit", app.server.url())).await;
    let audit = b.text().await;
    assert!(audit.contains("risk_block.clear"), "{audit}");
    assert!(audit.contains("cashier mistyped, INC-91"), "{audit}");
}
