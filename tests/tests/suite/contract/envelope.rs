//! The request and response envelope as the spec words it: where `meta` may be omitted,
//! empty optional context fields, and the decision meta (trace id, capabilities, score).
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
    let till_7 = shop.at_terminal(Some("till-7")).await;
    let r = till_7
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
