//! The live contract document.
use tests::{TestApp, oas31, send};

#[tokio::test]
async fn the_live_document_is_valid_openapi_3_1() {
    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let r = send(app.get("/openapi").header("x-api-key", &t.platform_key)).await;
    r.assert_envelope();
    assert_eq!(r.status, 200);
    let doc = &r.body["data"];
    assert_eq!(doc["openapi"], "3.1.0");
    if let Err(errors) = oas31::validate(doc) {
        panic!(
            "the served document is not valid OpenAPI 3.1:\n{}",
            errors.join("\n")
        );
    }
    // The unwrapped copy for tooling is the same document.
    let raw: serde_json::Value = app
        .client
        .get(format!("{}/openapi.json", app.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(&raw, doc);
}

#[tokio::test]
async fn every_operation_carries_a_domain_tag_and_stability_and_both_schemes_are_declared() {
    let doc = api::http::openapi::build().document;
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["ApiKeyAuth"]["in"], "header");
    assert_eq!(schemes["ApiKeyAuth"]["name"], "x-api-key");
    assert_eq!(schemes["PosTerminalJWT"]["type"], "http");
    assert_eq!(schemes["PosTerminalJWT"]["scheme"], "bearer");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let tags = op["tags"]
                .as_array()
                .unwrap_or_else(|| panic!("{method} {path} has no tags"));
            assert_eq!(tags.len(), 1, "{method} {path}");
            let s = op["x-stability"].as_str().unwrap_or_default();
            assert!(s == "ga" || s == "beta", "{method} {path}: {s}");
        }
    }
}

/// The spec's domains include `transactions`: reconciliation (the transactions feed and
/// detail, disputes, unattach) is tagged so, in the document and in capabilities alike.
/// (That every tag is one of the spec's domains is `http::openapi`'s own test.)
#[tokio::test]
async fn reconciliation_operations_sit_in_the_transactions_domain() {
    let doc = api::http::openapi::build().document;
    let mut reconciliation = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let tag = op["tags"][0].as_str().unwrap_or_default();
            if path.contains("/transactions") {
                reconciliation += 1;
                assert_eq!(tag, "transactions", "{method} {path}");
            }
        }
    }
    assert_eq!(
        reconciliation, 5,
        "feed, detail, disputes, resolve, unattach"
    );

    let app = TestApp::spawn().await;
    let t = app.tenant(true).await;
    let caps = send(
        app.get("/capabilities")
            .header("x-api-key", &t.platform_key),
    )
    .await;
    let ops = caps.body["data"]["operations"].as_array().unwrap().clone();
    let feed = ops
        .iter()
        .find(|o| {
            o["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/transactions"))
        })
        .unwrap_or_else(|| panic!("the feed is listed: {ops:?}"));
    assert_eq!(feed["domain"], "transactions", "{feed}");
}

#[tokio::test]
async fn the_openapi_needs_a_credential_and_the_docs_page_is_served() {
    let app = TestApp::spawn().await;
    let r = send(app.get("/openapi")).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "INVALID_API_KEY");
    let docs = app
        .client
        .get(format!("{}/docs", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(docs.status(), 200);
    let html = docs.text().await.unwrap();
    assert!(
        html.contains("\"openapi\": \"3.1.0\""),
        "the docs page embeds the 3.1 document"
    );
}

/// Each example in the document (recorded from this suite's own exchanges) is what the
/// schema it illustrates allows, formats included: a parameter's, a request body's and a
/// response's. An example that drifted from the contract fails here.
#[test]
fn every_example_is_what_its_schema_allows() {
    let doc = api::http::openapi::build().document;
    let mut wrong = vec![];
    let mut checked = 0;
    let mut check = |at: String, schema: &serde_json::Value, example: &serde_json::Value| {
        // The schema as the root of a document that also holds the components, so its
        // `$ref`s resolve.
        let mut root = schema.clone();
        if let Some(obj) = root.as_object_mut() {
            obj.insert("components".into(), doc["components"].clone());
        }
        let validator = jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(&root)
            .unwrap_or_else(|e| panic!("{at}: schema does not compile: {e}"));
        for e in validator.iter_errors(example) {
            wrong.push(format!("{at} {}: {e}", e.instance_path()));
        }
        checked += 1;
    };
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let at = format!("{method} {path}");
            for p in op["parameters"].as_array().into_iter().flatten() {
                if let Some(example) = p.get("example") {
                    check(
                        format!("{at} parameter {}", p["name"]),
                        &p["schema"],
                        example,
                    );
                }
            }
            let bodies = op
                .pointer("/requestBody/content")
                .and_then(|c| c.as_object())
                .into_iter()
                .flatten()
                .map(|(_, media)| (format!("{at} request"), media));
            let replies = op["responses"]
                .as_object()
                .into_iter()
                .flatten()
                .flat_map(|(status, r)| {
                    r["content"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(move |(_, media)| (status.clone(), media))
                })
                .map(|(status, media)| (format!("{at} {status}"), media));
            for (at, media) in bodies.chain(replies) {
                if let Some(example) = media.get("example") {
                    check(at, &media["schema"], example);
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "examples the schema refuses:\n{}",
        wrong.join("\n")
    );
    assert!(checked > 100, "only {checked} examples in the document");
}
