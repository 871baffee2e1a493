//! Terminal tokens, the scope guard, and rate limits.
use std::time::Duration;

use api::domain::credentials::jwt::{self, Claims, JwtKeys};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use tests::{Reply, TestApp, TestTenant, send};
use uuid::Uuid;

fn envelope(merchant: Uuid, branch: Option<Uuid>) -> Value {
    let mut ctx = json!({"merchant_id": merchant.to_string()});
    if let Some(b) = branch {
        ctx["branch_id"] = json!(b.to_string());
    }
    json!({
        "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
        "context": ctx,
    })
}

async fn exchange(app: &TestApp, key: &str, body: &Value, idem: &str) -> Reply {
    send(
        app.post("/auth/token")
            .header("x-api-key", key)
            .header("Idempotency-Key", idem)
            .json(body),
    )
    .await
}

async fn token_for(
    app: &TestApp,
    t: &TestTenant,
    branch: Option<Uuid>,
    cashier: Option<&str>,
) -> String {
    let mut body = envelope(t.merchant_id, branch);
    if let Some(c) = cashier {
        body["cashier_id"] = json!(c);
    }
    let r = exchange(app, &t.platform_key, &body, &Uuid::new_v4().to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["token"].as_str().unwrap().to_string()
}

async fn heartbeat(app: &TestApp, token: &str, merchant: Uuid, branch: Option<Uuid>) -> Reply {
    send(
        app.post("/terminal/heartbeat")
            .bearer_auth(token)
            .json(&envelope(merchant, branch)),
    )
    .await
}

async fn validate(app: &TestApp, token: &str) -> Reply {
    send(app.get("/auth/token/validate").bearer_auth(token)).await
}

fn part(token: &str, i: usize) -> Value {
    let seg = token.split('.').nth(i).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(seg).unwrap()).unwrap()
}

fn secret() -> Vec<u8> {
    tests::test_config()
        .jwt_secret
        .unwrap()
        .expose()
        .as_bytes()
        .to_vec()
}

#[tokio::test]
async fn an_exchanged_token_carries_the_documented_claims() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let branch = t.branch_ids[0];
    let r = exchange(
        &app,
        &t.platform_key,
        &{
            let mut b = envelope(t.merchant_id, Some(branch));
            b["cashier_id"] = json!("cashier-7");
            b
        },
        &Uuid::new_v4().to_string(),
    )
    .await;
    r.assert_envelope();
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["data"];
    assert_eq!(d["token_type"], "Bearer");
    assert_eq!(d["expires_in"], 600);
    assert_eq!(d["sandbox"], true);
    assert_eq!(d["scope"]["branch_id"], branch.to_string());
    assert_eq!(
        d["scope"]["brand_id"],
        t.brand_id.to_string(),
        "the branch's brand, derived"
    );
    let token = d["token"].as_str().unwrap();
    let header = part(token, 0);
    assert_eq!(header["alg"], "HS256");
    assert!(header["kid"].is_string());
    let c = part(token, 1);
    assert_eq!(c["iss"], "service-pos-terminal");
    assert_eq!(c["aud"], "service-api");
    assert_eq!(c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(), 600);
    assert!(c["jti"].is_string());
    assert_eq!(c["integration_id"], t.integration_id.to_string());
    assert_eq!(c["enterprise_id"], t.merchant_id.to_string());
    assert_eq!(c["branch_id"], branch.to_string());
    assert_eq!(c["cashier_id"], "cashier-7");

    let v = validate(&app, token).await;
    assert_eq!(v.status, 200);
    assert_eq!(v.body["data"]["valid"], true);
    assert_eq!(v.body["data"]["sandbox"], true);
    assert_eq!(v.body["data"]["scope"]["cashier_id"], "cashier-7");
    let ttl = v.body["data"]["ttl_seconds"].as_i64().unwrap();
    assert!((590..=600).contains(&ttl), "{ttl}");

    let hb = heartbeat(&app, token, t.merchant_id, None).await;
    assert_eq!(hb.status, 200, "{}", hb.body);
    assert_eq!(hb.body["data"]["branch_id"], branch.to_string());
    assert_eq!(hb.body["data"]["cashier_id"], "cashier-7");
}

#[tokio::test]
async fn a_retried_exchange_returns_the_same_token() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let body = envelope(t.merchant_id, None);
    let idem = Uuid::new_v4().to_string();
    let a = exchange(&app, &t.platform_key, &body, &idem).await;
    let b = exchange(&app, &t.platform_key, &body, &idem).await;
    assert_eq!(a.body["data"]["token"], b.body["data"]["token"]);
    assert_eq!(b.body["meta"]["idempotency_replayed"], true);
    let dump = tests::dump_database(&app.server.state.db).await;
    assert!(
        !dump.contains(a.body["data"]["token"].as_str().unwrap()),
        "tokens are stored sealed"
    );
}

#[tokio::test]
async fn the_cashier_id_is_bounded_and_the_key_comes_from_the_header_only() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    for bad in ["x".repeat(65), "a\u{7}b".to_string()] {
        let mut body = envelope(t.merchant_id, None);
        body["cashier_id"] = json!(bad);
        let r = exchange(&app, &t.platform_key, &body, &Uuid::new_v4().to_string()).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.field_issues()[0].0, "/cashier_id");
    }
    let mut body = envelope(t.merchant_id, None);
    body["x-api-key"] = json!(t.platform_key);
    let r = send(
        app.post("/auth/token")
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "INVALID_API_KEY");
}

#[tokio::test]
async fn forged_tokens_get_their_reason_and_are_refused_on_terminal_routes() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let good = token_for(&app, &t, None, None).await;
    let claims: Claims = serde_json::from_value(part(&good, 1)).unwrap();
    let sign = |c: &Claims, secret: &[u8]| JwtKeys::new("k1", secret, &[]).sign(c).unwrap();

    let mut expired = claims.clone();
    expired.iat -= 1200;
    expired.exp -= 1200;
    let mut foreign_aud = claims.clone();
    foreign_aud.aud = "consumer-app".into();
    let mut consumer_iss = claims.clone();
    consumer_iss.iss = "service-consumer".into();
    let alg_none = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        good.split('.').nth(1).unwrap()
    );
    let truncated = good[..good.len() - 10].to_string();
    let cases = [
        (alg_none, "bad_signature"),
        (
            sign(&claims, b"another-secret-another-secret-another"),
            "bad_signature",
        ),
        (sign(&foreign_aud, &secret()), "wrong_audience"),
        (sign(&consumer_iss, &secret()), "wrong_audience"),
        (sign(&expired, &secret()), "expired"),
        (truncated, "bad_signature"),
        ("not-a-jwt".to_string(), "malformed"),
    ];
    for (token, reason) in cases {
        let v = validate(&app, &token).await;
        v.assert_envelope();
        assert_eq!(v.status, 200, "{reason}: {}", v.body);
        assert_eq!(v.body["data"]["valid"], false);
        assert_eq!(v.body["data"]["reason"], reason, "{token}");
        let hb = heartbeat(&app, &token, t.merchant_id, None).await;
        assert_eq!(hb.status, 401, "{reason}");
        assert_eq!(hb.code(), "INVALID_API_KEY");
    }
    let r = send(app.get("/auth/token/validate")).await;
    assert_eq!(r.status, 401, "only a missing token is 401");
    // Validation never extends a token.
    let before = part(&good, 1)["exp"].clone();
    validate(&app, &good).await;
    assert_eq!(part(&good, 1)["exp"], before);
    let _ = jwt::TTL_SECS;
}

#[tokio::test]
async fn a_branch_tokens_scope_cannot_be_widened() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let token = token_for(&app, &t, Some(t.branch_ids[0]), None).await;
    assert_eq!(
        heartbeat(&app, &token, t.merchant_id, Some(t.branch_ids[0]))
            .await
            .status,
        200
    );
    let r = heartbeat(&app, &token, t.merchant_id, Some(t.branch_ids[1])).await;
    r.assert_envelope();
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "FORBIDDEN");
    // A branch key cannot mint a token for its sibling branch either.
    let made = send(
        app.post("/auth/keys")
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&{
                let mut b = envelope(t.merchant_id, None);
                b["enterprise_id"] = json!(t.merchant_id.to_string());
                b["brand_id"] = json!(t.brand_id.to_string());
                b["branch_id"] = json!(t.branch_ids[0].to_string());
                b
            }),
    )
    .await;
    let branch_key = made.body["data"]["raw_key"].as_str().unwrap();
    let r = exchange(
        &app,
        branch_key,
        &envelope(t.merchant_id, Some(t.branch_ids[1])),
        &Uuid::new_v4().to_string(),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
}

#[tokio::test]
async fn another_tenants_merchant_gets_the_same_answer_whether_it_exists_or_not() {
    let app = TestApp::spawn().await;
    let a = app.tenant(true).await;
    let b = app.tenant(true).await;
    let token = token_for(&app, &a, None, None).await;
    let real = heartbeat(&app, &token, b.merchant_id, None).await;
    let made_up = heartbeat(&app, &token, Uuid::now_v7(), None).await;
    assert_eq!(real.status, 403);
    assert_eq!(made_up.status, 403);
    assert_eq!(real.body["error"], made_up.body["error"]);
    let text = String::from_utf8_lossy(&real.bytes);
    assert!(
        !text.contains(&b.merchant_id.to_string()),
        "the answer names nothing of the other tenant"
    );
    // A branch of another tenant, under our own merchant.
    let r = heartbeat(&app, &token, a.merchant_id, Some(b.branch_ids[0])).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.body["error"], real.body["error"]);
}

#[tokio::test]
async fn token_validation_is_rate_limited_with_all_four_headers_and_recovers() {
    let app = TestApp::spawn_with(false, |c| {
        c.rate_limit = 3;
        c.rate_limit_sandbox = 5;
        c.rate_limit_window_secs = 2;
    })
    .await;
    let t = app.tenant(true).await;
    let token = token_for(&app, &t, None, None).await;
    for i in 0..5 {
        let r = validate(&app, &token).await;
        assert_eq!(
            r.status, 200,
            "request {i} is within the sandbox limit of 5"
        );
        assert_eq!(r.headers["x-ratelimit-limit"], "5");
        assert_eq!(
            r.headers["x-ratelimit-remaining"].to_str().unwrap(),
            (4 - i).to_string()
        );
        assert!(r.headers.get("x-ratelimit-reset").is_some());
    }
    let r = validate(&app, &token).await;
    r.assert_envelope();
    assert_eq!(r.status, 429);
    assert_eq!(r.code(), "RATE_LIMITED");
    for h in [
        "retry-after",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert!(r.headers.get(h).is_some(), "{h} missing");
    }
    assert_eq!(r.headers["x-ratelimit-remaining"], "0");
    assert_eq!(r.body["error"]["details"]["limit"], 5);
    assert_eq!(r.body["error"]["details"]["window_seconds"], 2);
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait));
    tokio::time::sleep(Duration::from_millis(wait * 1000 + 100)).await;
    assert_eq!(
        validate(&app, &token).await.status,
        200,
        "the window recovers"
    );
}

/// Issue 25, point 5: a token signed with our secret but made to live longer than ten
/// minutes, or issued (or starting) in the future, is not one we mint; an `aud` array
/// without our audience is the wrong audience, not a malformed token.
#[tokio::test]
async fn a_token_we_would_never_mint_is_refused_by_its_reason() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let good = token_for(&app, &t, None, None).await;
    let claims: Claims = serde_json::from_value(part(&good, 1)).unwrap();
    let sign = |c: &Value| {
        use hmac::{Hmac, KeyInit, Mac};
        let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT","kid":"k1"}"#);
        let p = URL_SAFE_NO_PAD.encode(serde_json::to_vec(c).unwrap());
        let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&secret()).unwrap();
        mac.update(format!("{h}.{p}").as_bytes());
        format!(
            "{h}.{p}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    };
    let base = serde_json::to_value(&claims).unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = base.clone();
        f(&mut c);
        sign(&c)
    };
    let iat = claims.iat;
    let cases = [
        (
            with(&|c| c["exp"] = json!(iat + 10 * 365 * 24 * 3600)),
            "malformed",
        ),
        (with(&|c| c["exp"] = json!(iat + 601)), "malformed"),
        (
            with(&|c| {
                c["iat"] = json!(iat + 300);
                c["exp"] = json!(iat + 600);
            }),
            "malformed",
        ),
        (with(&|c| c["nbf"] = json!(iat + 300)), "malformed"),
        (
            with(&|c| c["aud"] = json!(["consumer-app", "partner-portal"])),
            "wrong_audience",
        ),
    ];
    for (token, reason) in cases {
        let v = validate(&app, &token).await;
        assert_eq!(v.status, 200, "{reason}: {}", v.body);
        assert_eq!(v.body["data"]["valid"], false, "{reason}");
        assert_eq!(v.body["data"]["reason"], reason, "{}", part(&token, 1));
        let hb = heartbeat(&app, &token, t.merchant_id, None).await;
        assert_eq!((hb.status, hb.code()), (401, "INVALID_API_KEY"), "{reason}");
    }
    // The same claims with our audience among others, and our own token, are good.
    for token in [
        with(&|c| c["aud"] = json!(["consumer-app", "service-api"])),
        good,
    ] {
        assert_eq!(validate(&app, &token).await.body["data"]["valid"], true);
        assert_eq!(
            heartbeat(&app, &token, t.merchant_id, None).await.status,
            200
        );
    }
}

/// Issue 25, point 5: suspending an integration ends its terminal tokens on the next
/// request, on every replica, though they were minted before; reactivating brings them
/// back. (Revoking the key a token came from does not: see the next test.)
#[tokio::test]
async fn a_suspended_integrations_tokens_stop_at_once_on_every_replica() {
    use tests::shop::Shop;
    let a = TestApp::spawn().await;
    // A second replica: its own process state, sharing the database and (in production)
    // Redis; embedded mode is one process, whose replicas share one in-process store.
    let b = TestApp::spawn().await;
    let shop = Shop::open(&a).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    assert_eq!(shop.pay(&c, 10).await.status, 200);
    let mint = |app: &TestApp| {
        send(
            app.post("/qr/mint")
                .bearer_auth(&shop.token)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(
                    &shop.body(json!({"customer": {"credential_type": "phone", "phone": c.phone}})),
                ),
        )
    };
    // Replica b has seen the integration active (and cached that).
    assert_eq!(mint(&b).await.status, 200);

    let r = shop
        .operator(
            &format!(
                "/operator/integrations/{}/suspend",
                shop.tenant.integration_id
            ),
            json!({"reason": "fraud review"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for app in [&a, &b] {
        let r = mint(app).await;
        assert_eq!((r.status, r.code()), (401, "INVALID_API_KEY"), "{}", r.body);
        let qr = "any";
        let r = send(
            app.post("/payments")
                .bearer_auth(&shop.token)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(
                    &shop.body(json!({"credential": {"type": "qr", "qr_payload": qr},
                                        "amount_minor": 10, "currency": "EUR"})),
                ),
        )
        .await;
        assert_eq!((r.status, r.code()), (401, "INVALID_API_KEY"), "{}", r.body);
    }
    assert_eq!(shop.balance(&c).await["actual_minor"], 990);

    let r = shop
        .operator(
            &format!(
                "/operator/integrations/{}/reactivate",
                shop.tenant.integration_id
            ),
            json!({"reason": "cleared"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for app in [&a, &b] {
        assert_eq!(mint(app).await.status, 200);
    }
}

/// The contract keeps already-minted tokens alive for their TTL when their key is revoked
/// (no revocation list); the key itself stops at once.
#[tokio::test]
async fn a_revoked_keys_tokens_live_out_their_ttl_as_the_contract_says() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let r = send(
        app.post("/auth/keys")
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&json!({
                "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
                "context": {"merchant_id": t.merchant_id.to_string()},
                "enterprise_id": t.merchant_id.to_string(), "label": "till"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (key, key_id) = (
        r.body["data"]["raw_key"].as_str().unwrap().to_string(),
        r.body["data"]["key_id"].as_str().unwrap().to_string(),
    );
    let minted = exchange(
        &app,
        &key,
        &envelope(t.merchant_id, None),
        &Uuid::new_v4().to_string(),
    )
    .await;
    let token = minted.body["data"]["token"].as_str().unwrap().to_string();
    let r = send(
        app.post(&format!("/auth/keys/{key_id}/revoke"))
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&json!({
                "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
                "context": {"merchant_id": t.merchant_id.to_string()}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(tests::key_works(&app, &key).await, 401);
    assert_eq!(
        heartbeat(&app, &token, t.merchant_id, None).await.status,
        200
    );
}
