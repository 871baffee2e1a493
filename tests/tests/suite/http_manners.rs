//! HTTP manners a client library or a browser relies on: `Allow` on a 405 and on OPTIONS,
//! a 401 that names the credential the operation takes, a cacheable and compressed
//! document, and CORS only for the origins an operator listed for the caller's integration.
use serde_json::json;
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

fn allow(r: &reqwest::Response) -> String {
    r.headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_405_and_an_options_request_name_the_allowed_methods() {
    let app = TestApp::spawn().await;
    let r = app
        .client
        .delete(format!("{}/health", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(allow(&r), "GET, HEAD, OPTIONS");

    let r = app
        .client
        .get(format!("{}/payments", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(allow(&r), "OPTIONS, POST");

    let r = app
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/payments", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(allow(&r), "OPTIONS, POST");
    assert!(
        r.headers().get("access-control-allow-origin").is_none(),
        "no CORS grant without an Origin"
    );

    let r = send(app.client.request(
        reqwest::Method::OPTIONS,
        format!("{}/no/such/path", app.url),
    ))
    .await;
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
}

#[tokio::test]
async fn a_401_names_the_credential_the_operation_takes_and_the_one_presented() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    // /qr/mint takes a terminal JWT only; a platform key is the wrong credential.
    let r = send(
        app.post("/qr/mint")
            .header("x-api-key", &t.platform_key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&json!({})),
    )
    .await;
    r.assert_envelope();
    assert_eq!((r.status, r.code()), (401, "INVALID_API_KEY"), "{}", r.body);
    let d = &r.body["error"]["details"];
    assert_eq!(d["expected_schemes"], json!(["PosTerminalJWT"]), "{d}");
    assert_eq!(d["presented_schemes"], json!(["ApiKeyAuth"]), "{d}");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("Authorization: Bearer"), "{message}");
    assert!(
        !r.body.to_string().contains(&t.platform_key),
        "never echoed"
    );

    // Nothing presented.
    let r = send(app.get("/webhooks/subscriptions")).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.body["error"]["details"]["presented_schemes"], json!([]));
    assert!(
        r.body["error"]["details"]["expected_schemes"]
            .as_array()
            .unwrap()
            .contains(&json!("ApiKeyAuth")),
        "{}",
        r.body
    );

    // The right kind of credential, but not a valid one.
    let r = send(
        app.post("/qr/mint")
            .bearer_auth("not.a.jwt")
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&json!({})),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["presented_schemes"],
        json!(["PosTerminalJWT"])
    );
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid, expired or revoked"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn the_public_document_is_cacheable_and_compressed() {
    let app = TestApp::spawn().await;
    let url = format!("{}/openapi.json", app.url);
    let r = app.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let plain = r.bytes().await.unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&plain).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");

    let r = app
        .client
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    assert!(r.bytes().await.unwrap().is_empty());

    for path in ["/openapi.json", "/docs"] {
        let r = app
            .client
            .get(format!("{}{path}", app.url))
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-encoding"], "gzip", "{path}");
        let packed = r.bytes().await.unwrap();
        assert_eq!(&packed[..2], &[0x1f, 0x8b], "{path}: a gzip stream");
        if path == "/openapi.json" {
            assert!(
                packed.len() * 5 < plain.len(),
                "{} vs {}",
                packed.len(),
                plain.len()
            );
        }
    }
}

fn preflight(app: &TestApp, path: &str, origin: &str, method: &str) -> reqwest::RequestBuilder {
    app.client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}{path}", app.server.url()),
        )
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header(
            "access-control-request-headers",
            "authorization, content-type, idempotency-key",
        )
}

fn acao(h: &reqwest::header::HeaderMap) -> Option<String> {
    h.get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test]
async fn a_browser_may_call_terminal_operations_only_from_an_origin_its_integration_lists() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = Shop::open(&app).await;
    let c = shop.customer().await;
    let wallet = "https://wallet.example.com";
    let mint = |s: &Shop, origin: &str| {
        s.app
            .post("/qr/mint")
            .bearer_auth(&s.token)
            .header("origin", origin)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&s.body(json!({"wallet_user_id": c.wallet_user_id})))
    };

    // Nothing is allowed by default: refused before the operation runs.
    let r = preflight(&app, "/v1/qr/mint", wallet, "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(acao(r.headers()), None);
    let r = send(mint(&shop, wallet)).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);

    // An operator lists the origin for this integration; a bad origin is a field error.
    let path = format!(
        "/operator/integrations/{}/cors-origins",
        shop.tenant.integration_id
    );
    let r = shop
        .operator(
            &path,
            json!({"origins": ["http://wallet.example.com/app"], "reason": "wallet app"}),
        )
        .await;
    r.assert_field_error("/origins/0");
    let r = shop
        .operator(
            &path,
            json!({"origins": ["https://Wallet.Example.com"], "reason": "wallet app"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["origins"], json!([wallet]));

    let r = preflight(&app, "/v1/qr/mint", wallet, "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(acao(r.headers()).as_deref(), Some(wallet));
    assert_eq!(r.headers()["access-control-allow-methods"], "POST");
    let allowed_headers = r.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(allowed_headers.contains("idempotency-key") && !allowed_headers.contains("x-api-key"));

    let r = send(mint(&shop, wallet)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(acao(&r.headers).as_deref(), Some(wallet));
    let exposed = r.headers["access-control-expose-headers"].to_str().unwrap();
    assert!(exposed.contains("x-request-id"), "{exposed}");

    // Another origin, and another integration's terminal from the listed origin: refused.
    let r = preflight(&app, "/v1/qr/mint", "https://evil.example.com", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(acao(r.headers()), None);
    let r = send(mint(&shop, "https://evil.example.com")).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    let r = send(mint(&other, wallet)).await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);

    // An operation a platform key calls is never offered to a browser.
    let r = preflight(&app, "/v1/auth/keys", wallet, "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(acao(r.headers()), None);

    // Without an Origin (a server) nothing changes.
    let r = send(
        app.post("/qr/mint")
            .bearer_auth(&other.token)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&other.body(json!({"wallet_user_id": other.customer().await.wallet_user_id}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(acao(&r.headers), None);
}
