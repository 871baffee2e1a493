//! Requests built from the spec alone, as a partner's engineer codes them: each test is one
//! of the spec's sentences (issue 26).
use serde_json::{Value, json};
use tests::{Reply, TestApp, send, shop::Shop};
use uuid::Uuid;

/// `body` without its `meta`.
fn without_meta(shop: &Shop<'_>, extra: Value) -> Value {
    let mut body = shop.body(extra);
    body.as_object_mut().unwrap().remove("meta");
    body
}

fn no_meta_issue(r: &Reply, what: &str) {
    r.assert_envelope();
    assert!(
        !r.field_issues().iter().any(|(f, _)| f.starts_with("/meta")),
        "{what}: a missing meta is never a VALIDATION_ERROR: {}",
        r.body
    );
    assert_eq!(r.status, 200, "{what}: {}", r.body);
}

/// "Where a schema marks `meta` as optional for an operation, it may be omitted": the
/// enrollment initiate and verify bodies, the claim, the SKU top-up, the reload-bonus
/// config and the session identify (whose tables mark it optional or not required), and
/// enrollment resend with them.
#[tokio::test]
async fn meta_may_be_omitted_where_the_spec_marks_it_optional() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer_in("PENDING_PROOF").await;

    let r = shop
        .post_body(
            "/enroll/initiate",
            &without_meta(&shop, json!({"phone": c.phone})),
        )
        .await;
    no_meta_issue(&r, "enroll initiate");
    let r = shop
        .post_body(
            "/enroll/resend",
            &without_meta(&shop, json!({"phone": c.phone})),
        )
        .await;
    // Within its cooldown: refused by the rate limit, which comes after the body passed.
    r.assert_envelope();
    assert_eq!(
        (r.status, r.code()),
        (429, "RATE_LIMITED"),
        "enroll resend: {}",
        r.body
    );
    let sms = shop.sms_after(&c.phone, "enrollment", 0).await;
    let code = sms["code"].as_str().unwrap();
    let r = shop
        .post_body(
            "/enroll/verify",
            &without_meta(&shop, json!({"code": code, "phone": c.phone})),
        )
        .await;
    no_meta_issue(&r, "enroll verify");
    assert_eq!(r.body["data"]["state"], "VERIFIED");

    let r = shop
        .post_body(
            "/claims",
            &without_meta(&shop, json!({"wallet_user_id": c.wallet_user_id})),
        )
        .await;
    no_meta_issue(&r, "claim");

    let sku = format!("card-{}", Uuid::new_v4().simple());
    let r = shop
        .control(
            "/skus",
            json!({"sku_id": sku, "name": "Top-up card", "currency": "EUR", "wallet_credits_minor": 500}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post_body(
            &format!("/topup/sku/{sku}"),
            &without_meta(
                &shop,
                json!({"pos_order_ref": Uuid::new_v4().to_string(), "quantity": 1,
                       "customer": {"credential_type": "phone", "phone": c.phone}}),
            ),
        )
        .await;
    no_meta_issue(&r, "SKU top-up");

    let r = send(
        app.post("/topup/reload-bonus/config")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&without_meta(
                &shop,
                json!({"wallet_program_id": shop.tenant.wallet_program_id.to_string(), "currency": "EUR",
                       "tiers": [{"min_amount_minor": 1, "bonus_minor": 50}]}),
            )),
    )
    .await;
    no_meta_issue(&r, "reload-bonus config");

    let r = shop.post("/checkout/sessions", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let r = shop
        .post_body(
            &format!("/checkout/sessions/{session}/identify"),
            &without_meta(
                &shop,
                json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
            ),
        )
        .await;
    no_meta_issue(&r, "session identify");
    assert_eq!(r.body["data"]["session"]["state"], "IDENTIFIED");

    // Given, it must still be valid; and where the spec requires it (POST /payments), a
    // missing meta is refused with the field named.
    let mut body = without_meta(&shop, json!({"phone": c.phone}));
    body["meta"] = json!({"api_version": "1999-01-01"});
    let r = shop.post_body("/enroll/initiate", &body).await;
    r.assert_field_error("/meta/api_version");
    let qr = shop.qr(&c).await;
    let r = shop
        .post_body(
            "/payments",
            &without_meta(
                &shop,
                json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 1, "currency": "EUR"}),
            ),
        )
        .await;
    r.assert_field_error("/meta/api_version");
    app.stop().await;
}

/// Walks a list page by page (`limit`), returning every item's `id_field`; checks each
/// page's `meta.has_more` and that `meta.next_cursor` is null on the last page only.
async fn walk(app: &TestApp, key: &str, path: &str, limit: u64, id_field: &str) -> Vec<String> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}{sep}limit={limit}&cursor={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let r = send(app.get(&url).header("x-api-key", key)).await;
        r.assert_envelope();
        assert_eq!(r.status, 200, "{url}: {}", r.body);
        let items = r.body["data"].as_array().unwrap();
        assert!(items.len() as u64 <= limit, "{url}: {}", r.body);
        ids.extend(
            items
                .iter()
                .map(|i| i[id_field].as_str().unwrap().to_string()),
        );
        let more = r.body["meta"]["has_more"].as_bool().expect("meta.has_more");
        match r.body["meta"]["next_cursor"].as_str() {
            Some(c) => {
                assert!(more, "{url}: a cursor with has_more false: {}", r.body);
                cursor = Some(c.to_string());
            }
            None => {
                assert!(!more, "{url}: has_more without a cursor: {}", r.body);
                assert_eq!(r.body["meta"]["next_cursor"], Value::Null, "{url}");
                return ids;
            }
        }
    }
}

/// "Page size: default 50, maximum 200 (cursor-paginated lists: limit, cursor)", and
/// "meta.next_cursor: null on the final page": on the SKU, budget and webhook endpoint
/// lists as on every other, with one rule for a limit out of range and one cursor format
/// that another list's cursor does not fit.
#[tokio::test]
async fn every_list_pages_by_limit_and_cursor_with_the_same_bounds() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let key = shop.tenant.platform_key.clone();
    let mut skus = Vec::new();
    for i in 0..51 {
        let sku = format!("card-{i:02}-{}", Uuid::new_v4().simple());
        let r = shop
            .control(
                "/skus",
                json!({"sku_id": sku, "name": "Card", "currency": "EUR", "wallet_credits_minor": 100}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        skus.push(sku);
    }
    let mut budgets = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..3 {
        let r = shop
            .control(
                "/incentives/budgets",
                json!({"name": format!("Campaign {i}"), "currency": "EUR", "limit_minor": 1_000}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        budgets.push(r.body["data"]["budget_id"].as_str().unwrap().to_string());
        let r = shop
            .control(
                "/webhooks/subscriptions",
                json!({"url": format!("http://127.0.0.1:9/hook/{i}"), "event_types": ["payment.completed"]}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        endpoints.push(
            r.body["data"]["subscription"]["subscription_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }

    // Default 50.
    let r = send(app.get("/skus").header("x-api-key", &key)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 50);
    assert_eq!(r.body["meta"]["has_more"], true);
    // Every item once, in the order they were made, however the pages fall.
    assert_eq!(walk(&app, &key, "/skus", 200, "sku_id").await, skus);
    assert_eq!(walk(&app, &key, "/skus", 20, "sku_id").await, skus);
    assert_eq!(
        walk(&app, &key, "/incentives/budgets", 2, "budget_id").await,
        budgets
    );
    assert_eq!(
        walk(&app, &key, "/webhooks/subscriptions", 2, "subscription_id").await,
        endpoints
    );

    // Another list's cursor (the key list's: the tenant's platform key and one more).
    let r = send(
        app.post("/auth/keys")
            .header("x-api-key", &key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(
                &shop
                    .body(json!({"enterprise_id": shop.merchant().to_string(), "label": "second"})),
            ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = send(app.get("/auth/keys?limit=1").header("x-api-key", &key)).await;
    let other_lists_cursor = r.body["meta"]["next_cursor"].as_str().unwrap().to_string();
    for path in [
        "/skus",
        "/incentives/budgets",
        "/webhooks/subscriptions",
        "/auth/keys",
        "/offers",
    ] {
        for (query, field) in [
            ("limit=0", "query:limit"),
            ("limit=201", "query:limit"),
            ("cursor=not-a-cursor", "query:cursor"),
        ] {
            let r = send(
                app.get(&format!("{path}?{query}"))
                    .header("x-api-key", &key),
            )
            .await;
            r.assert_envelope();
            assert_eq!(
                (r.status, r.code()),
                (400, "VALIDATION_ERROR"),
                "{path}?{query}: {}",
                r.body
            );
            assert!(
                r.field_issues().iter().any(|(f, _)| f == field),
                "{path}?{query} names {field}: {}",
                r.body
            );
        }
        if path != "/auth/keys" {
            let r = send(
                app.get(&format!("{path}?cursor={other_lists_cursor}"))
                    .header("x-api-key", &key),
            )
            .await;
            assert_eq!(
                (r.status, r.code()),
                (400, "VALIDATION_ERROR"),
                "{path} refuses another list's cursor: {}",
                r.body
            );
        }
    }
}

/// A terminal token of a key scoped to one of the tenant's branches.
async fn branch_token(shop: &Shop<'_>, branch: Uuid) -> String {
    let t = &shop.tenant;
    let r = shop
        .control(
            "/auth/keys",
            json!({"enterprise_id": t.merchant_id.to_string(), "brand_id": t.brand_id.to_string(),
                   "branch_id": branch.to_string(), "label": "till"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let key = r.body["data"]["raw_key"].as_str().unwrap().to_string();
    let mut body = shop.body(json!({}));
    body["context"]["branch_id"] = json!(branch.to_string());
    let r = send(
        shop.app
            .post("/auth/token")
            .header("x-api-key", &key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["token"].as_str().unwrap().to_string()
}

/// POST `path` as the terminal holding `token`, in `branch`, with `extra` in the body.
async fn as_terminal(
    shop: &Shop<'_>,
    token: &str,
    branch: Uuid,
    path: &str,
    extra: Value,
) -> Reply {
    let mut body = shop.body(extra);
    body["context"]["branch_id"] = json!(branch.to_string());
    send(
        shop.app
            .post(path)
            .bearer_auth(token)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await
}

/// "POST /qr/mint: meta and context plus two optional inputs": the customer is the one
/// the cashier identified in the checkout session (`context.service_session_id`); the
/// short code is off unless asked for. A session not yet IDENTIFIED, of another branch or
/// of another tenant never yields a QR.
#[tokio::test]
async fn a_qr_is_minted_for_the_customer_identified_in_the_checkout_session() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let branch = shop.tenant.branch_ids[0];
    let till = branch_token(&shop, branch).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let r = as_terminal(&shop, &till, branch, "/checkout/sessions", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let in_session = json!({"context": {"service_session_id": session}});

    // Nobody identified yet: no QR, and the field says why.
    let r = as_terminal(&shop, &till, branch, "/qr/mint", in_session.clone()).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert!(
        r.field_issues()
            .iter()
            .any(|(f, i)| f == "/context/service_session_id" && i == "session_not_identified"),
        "{}",
        r.body
    );

    let r = as_terminal(
        &shop,
        &till,
        branch,
        &format!("/checkout/sessions/{session}/identify"),
        json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Another branch's terminal, another tenant's terminal, a session that exists nowhere.
    let other_branch = shop.tenant.branch_ids[1];
    let other_till = branch_token(&shop, other_branch).await;
    let r = as_terminal(
        &shop,
        &other_till,
        other_branch,
        "/qr/mint",
        in_session.clone(),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    let stranger = Shop::open(&app).await;
    let r = stranger
        .post(
            "/qr/mint",
            json!({"context": {"service_session_id": session}}),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    let r = shop
        .post(
            "/qr/mint",
            json!({"context": {"service_session_id": Uuid::now_v7().to_string()}}),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"), "{}", r.body);
    // A customer named beside the session must be the session's.
    let someone_else = shop.customer().await;
    let mut named = in_session.clone();
    named["wallet_user_id"] = json!(someone_else.wallet_user_id);
    let r = as_terminal(&shop, &till, branch, "/qr/mint", named).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );

    // The spec's request: meta, context, nothing else. No short code unless asked for.
    let minted = as_terminal(&shop, &till, branch, "/qr/mint", in_session.clone()).await;
    assert_eq!(minted.status, 200, "{}", minted.body);
    assert_eq!(minted.body["data"]["short_code"], Value::Null);
    let qr = minted.body["data"]["qr_payload"]
        .as_str()
        .unwrap()
        .to_string();
    let mut with_code = in_session.clone();
    with_code["include_short_code"] = json!(true);
    let r = as_terminal(&shop, &till, branch, "/qr/mint", with_code).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["short_code"].as_str().unwrap().len(), 5);
    // That second mint replaced the first nonce; mint again and pay in the session.
    let _ = qr;
    let minted = as_terminal(&shop, &till, branch, "/qr/mint", in_session.clone()).await;
    let qr = minted.body["data"]["qr_payload"]
        .as_str()
        .unwrap()
        .to_string();
    let mut pay = in_session.clone();
    pay["credential"] = json!({"type": "qr", "qr_payload": qr});
    pay["amount_minor"] = json!(250);
    pay["currency"] = json!("EUR");
    let r = as_terminal(&shop, &till, branch, "/payments", pay).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["wallet_id"], c.wallet_id.as_str());
    assert_eq!(shop.balance(&c).await["actual_minor"], 750);

    // Neither a session nor a customer: the field to give.
    let r = shop.post("/qr/mint", json!({})).await;
    r.assert_field_error("/context/service_session_id");
}

/// "A used or expired QR nonce returns CREDENTIAL_EXPIRED_OR_REPLAYED" even when its
/// checkout session completed: the credential is checked first, and its code tells the
/// cashier what to do (mint a new nonce). Covered with the session's other rules in
/// `customers::a_session_opens_gets_identified_and_is_completed_by_its_payment`.
#[tokio::test]
async fn a_replayed_nonce_of_a_completed_session_is_credential_expired_or_replayed() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let r = shop.post("/checkout/sessions", json!({})).await;
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let r = shop
        .post(
            &format!("/checkout/sessions/{session}/identify"),
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop
        .post(
            "/qr/mint",
            json!({"context": {"service_session_id": session}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let qr = r.body["data"]["qr_payload"].as_str().unwrap().to_string();
    let pay = json!({"context": {"service_session_id": session},
                     "credential": {"type": "qr", "qr_payload": qr},
                     "amount_minor": 100, "currency": "EUR"});
    let r = shop.post("/payments", pay.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = shop.post("/payments", pay).await;
    assert_eq!(
        (r.status, r.code()),
        (400, "CREDENTIAL_EXPIRED_OR_REPLAYED"),
        "{}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
}

/// "Rate limiting is applied per integration on identify": on every route that resolves a
/// customer from an identifier too, one budget per integration, so no route is a side
/// door for enumerating phone numbers. Past it each answers 429 RATE_LIMITED with
/// Retry-After and X-RateLimit-* headers, and changes nothing.
#[tokio::test]
async fn every_route_that_resolves_a_customer_from_an_identifier_shares_the_identify_limit() {
    const BUDGET: u32 = 6;
    let app = TestApp::spawn_with(false, |c| {
        c.rate_limit = BUDGET;
        c.rate_limit_sandbox = BUDGET;
        c.rate_limit_window_secs = 3600;
    })
    .await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let sku = format!("card-{}", Uuid::new_v4().simple());
    let r = shop
        .control(
            "/skus",
            json!({"sku_id": sku, "name": "Card", "currency": "EUR", "wallet_credits_minor": 100}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let by_phone = json!({"credential_type": "phone", "phone": c.phone});
    let routes: Vec<(&str, String, Value)> = vec![
        (
            "identify",
            "/identify".into(),
            json!({"credential": by_phone}),
        ),
        ("claim", "/claims".into(), json!({"customer": by_phone})),
        (
            "offer evaluation",
            "/offers/evaluate".into(),
            json!({"customer": by_phone, "amount_minor": 100, "currency": "EUR"}),
        ),
        ("QR mint", "/qr/mint".into(), json!({"customer": by_phone})),
        (
            "OTP send",
            "/payments/otp/send".into(),
            json!({"phone": c.phone, "amount_minor": 10, "currency": "EUR", "order_ref": "o-1"}),
        ),
        (
            "SKU top-up",
            format!("/topup/sku/{sku}"),
            json!({"customer": by_phone, "quantity": 1, "pos_order_ref": "pos-1"}),
        ),
    ];
    assert_eq!(routes.len() as u32, BUDGET);
    for (what, path, extra) in &routes {
        let r = shop.post(path, extra.clone()).await;
        assert_eq!(r.status, 200, "{what} within the budget: {}", r.body);
    }
    let balance = shop.balance(&c).await;
    for (what, path, extra) in &routes {
        let r = shop.post(path, extra.clone()).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (429, "RATE_LIMITED"),
            "{what} past the shared budget: {}",
            r.body
        );
        assert!(r.headers.get("retry-after").is_some(), "{what}");
        assert_eq!(
            r.headers
                .get("x-ratelimit-limit")
                .and_then(|v| v.to_str().ok()),
            Some(BUDGET.to_string().as_str()),
            "{what}"
        );
        assert_eq!(
            r.headers
                .get("x-ratelimit-remaining")
                .and_then(|v| v.to_str().ok()),
            Some("0"),
            "{what}"
        );
    }
    assert_eq!(
        shop.balance(&c).await,
        balance,
        "a refused top-up credits nothing"
    );
}

/// REQUIRES_DYNAMIC_CREDENTIAL (422), "Path needs a dynamic credential (QR or OTP)": a
/// payment presented with a static identifier of the customer (a phone, a card
/// fingerprint, a provider or wallet id) is refused with the accepted types, and moves
/// nothing. And no credential type is advertised that can never succeed: the OpenAPI
/// union and GET /capabilities list the same enabled types, without `pass_tap`.
#[tokio::test]
async fn a_payment_needs_a_dynamic_credential_and_only_enabled_types_are_advertised() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let caps = send(
        app.get("/capabilities")
            .header("x-api-key", &shop.tenant.platform_key),
    )
    .await;
    let enabled = caps.body["data"]["supported_payment_credential_types"].clone();
    assert_eq!(enabled, json!(["otp", "qr", "short_code"]));
    for cred in [
        json!({"type": "phone", "phone": c.phone}),
        json!({"type": "wallet_user_id", "wallet_user_id": c.wallet_user_id}),
        json!({"type": "card_fingerprint", "card_fingerprint": "fp-0123456789"}),
        json!({"type": "provider_customer_id", "provider_customer_id": "cust-1"}),
    ] {
        let r = shop.pay_with(cred.clone(), 100).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (422, "REQUIRES_DYNAMIC_CREDENTIAL"),
            "{cred}: {}",
            r.body
        );
        assert_eq!(
            r.body["error"]["details"]["accepted"], enabled,
            "{}",
            r.body
        );
        assert_eq!(r.body["error"]["details"]["presented"], cred["type"]);
    }
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);

    let doc = send(app.get("/openapi.json")).await;
    assert_eq!(doc.status, 200);
    let union = &doc.body["components"]["schemas"]["PaymentCredential"];
    let mut advertised: Vec<String> = union["discriminator"]["mapping"]
        .as_object()
        .expect("a discriminator mapping")
        .keys()
        .cloned()
        .collect();
    advertised.sort();
    assert_eq!(json!(advertised), enabled, "{union}");
}

/// The outbox payloads of `topic` for the shop's merchant.
async fn event_payloads(app: &TestApp, shop: &Shop<'_>, topic: &str) -> Vec<Value> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(shop.merchant()))
        .filter(entities::outbox::Column::Topic.eq(topic))
        .all(&app.server.state.db)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.payload)
        .collect()
}

/// "meta.decision_trace_id: opaque correlation id; echo it where a call accepts one",
/// "meta.capabilities: additive hints", "meta.data_completeness_score": a decision (an
/// identification, an offer evaluation, a payment) echoes the caller's trace id or issues
/// one, keeps it with the decision's event, and says what the till can do next; a retry
/// with another trace id is still the same request. All three are in the envelope schema.
#[tokio::test]
async fn decisions_carry_a_trace_id_capabilities_and_a_completeness_score() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let by_phone = json!({"credential_type": "phone", "phone": c.phone});

    let r = shop
        .post("/identify", json!({"credential": by_phone}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let issued = r.body["meta"]["decision_trace_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(issued.starts_with("dtr_"), "{}", r.body);
    assert_eq!(
        r.body["meta"]["capabilities"]["can_pay"], true,
        "{}",
        r.body
    );
    assert_eq!(r.body["meta"]["capabilities"]["enrollment_required"], false);
    // The test envelope names a terminal: a quarter of the optional context.
    assert_eq!(r.body["meta"]["data_completeness_score"], 25, "{}", r.body);
    let r = shop
        .post(
            "/identify",
            json!({"credential": by_phone, "meta": {"decision_trace_id": "till-7/trace-1"},
                   "context": {"terminal_id": "till-7", "cashier_id": "c-1",
                               "partner_session_id": "order-7"}}),
        )
        .await;
    assert_eq!(
        r.body["meta"]["decision_trace_id"], "till-7/trace-1",
        "{}",
        r.body
    );
    assert_eq!(r.body["meta"]["data_completeness_score"], 75);
    let identified = event_payloads(&app, &shop, "customer.identified").await;
    assert!(
        identified
            .iter()
            .any(|p| p["decision_trace_id"] == "till-7/trace-1"),
        "{identified:?}"
    );
    assert!(
        identified
            .iter()
            .any(|p| p["decision_trace_id"] == issued.as_str())
    );

    let r = shop
        .post(
            "/offers/evaluate",
            json!({"customer": by_phone, "amount_minor": 100, "currency": "EUR"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body["meta"]["decision_trace_id"]
            .as_str()
            .is_some_and(|t| t.starts_with("dtr_")),
        "{}",
        r.body
    );

    let qr = shop.qr(&c).await;
    let key = Uuid::new_v4().to_string();
    let pay = |trace: &str| {
        json!({"meta": {"decision_trace_id": trace},
               "credential": {"type": "qr", "qr_payload": qr},
               "amount_minor": 100, "currency": "EUR"})
    };
    let paid = shop
        .post_with_key("/payments", pay("pay-trace-1"), &key)
        .await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.body["meta"]["decision_trace_id"], "pay-trace-1");
    assert_eq!(paid.body["meta"]["capabilities"]["voidable"], true);
    assert_eq!(paid.body["meta"]["capabilities"]["refundable"], true);
    assert!(paid.body["meta"]["data_completeness_score"].is_i64());
    let completed = event_payloads(&app, &shop, "payment.completed").await;
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["decision_trace_id"], "pay-trace-1");
    // A retry that carries another trace id is the same request: the original replays.
    let again = shop
        .post_with_key("/payments", pay("pay-trace-2"), &key)
        .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["meta"]["idempotency_replayed"], true);
    assert_eq!(again.body["meta"]["decision_trace_id"], "pay-trace-1");
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);

    let doc = send(app.get("/openapi.json")).await;
    let meta = &doc.body["components"]["schemas"]["ResponseMeta"]["properties"];
    for field in [
        "decision_trace_id",
        "capabilities",
        "data_completeness_score",
    ] {
        assert!(
            meta.get(field).is_some(),
            "ResponseMeta declares {field}: {meta}"
        );
    }
}

/// A high configured limit is a limit, not an outage: at 1,000,000 identifications a
/// minute the interval is 60 µs, which the Redis limiter once rounded to 0 ms and
/// answered every identification with a 503 (the payments benchmark found it).
#[tokio::test]
async fn a_very_high_rate_limit_lets_requests_through() {
    let app = TestApp::spawn_with(false, |c| {
        c.rate_limit = 1_000_000;
        c.rate_limit_sandbox = 1_000_000;
    })
    .await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    for _ in 0..3 {
        let r = shop
            .post(
                "/identify",
                json!({"credential": {"credential_type": "phone", "phone": c.phone}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.headers
                .get("x-ratelimit-limit")
                .and_then(|v| v.to_str().ok()),
            Some("1000000")
        );
    }
}

/// "context.branch_id: null when not applicable", and the other optional context fields
/// with it: a till that sends `""` for a value it does not have means the same as null,
/// and is not refused; so is an empty `cashier_id` at token exchange.
#[tokio::test]
async fn empty_optional_context_fields_read_as_absent() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let empty = json!({"context": {"branch_id": "", "terminal_id": "", "cashier_id": "",
                                   "partner_session_id": "", "service_session_id": ""}});
    let mut identify = empty.clone();
    identify["credential"] = json!({"credential_type": "phone", "phone": c.phone});
    let r = shop.post("/identify", identify).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["meta"]["data_completeness_score"], 0, "{}", r.body);
    let mut pay = empty.clone();
    pay["credential"] = json!({"type": "qr", "qr_payload": shop.qr(&c).await});
    pay["amount_minor"] = json!(100);
    pay["currency"] = json!("EUR");
    pay["order_ref"] = json!("order-1");
    let r = shop.post("/payments", pay).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);

    let mut body = shop.body(json!({"cashier_id": ""}));
    body["context"]["terminal_id"] = json!("");
    let r = send(
        app.post("/auth/token")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"]["scope"]["cashier_id"],
        Value::Null,
        "{}",
        r.body
    );
}
