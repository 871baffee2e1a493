//! What the edge refuses before any route reads a request: a body whose meaning depends on
//! the reader (a member named twice) and text no field of the contract carries (control
//! characters, in a body, a query string or a path). Both are VALIDATION_ERROR naming the
//! field, never a 500, and change nothing.
use serde_json::{Value, json};
use tests::{Reply, TestApp, send, shop::Shop};
use uuid::Uuid;

fn issues(r: &Reply) -> Vec<(String, String)> {
    r.field_issues()
}

fn one(field: &str, issue: &str) -> Vec<(String, String)> {
    vec![(field.to_string(), issue.to_string())]
}

/// A payment body as text, with `tail` spliced in after the valid members.
fn payment_text(shop: &Shop<'_>, qr: &str, tail: &str) -> String {
    let mut body =
        shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "currency": "EUR"}));
    body.as_object_mut().unwrap().remove("context");
    let text = body.to_string();
    format!("{}, {tail}}}", &text[..text.len() - 1])
}

async fn post_text(shop: &Shop<'_>, path: &str, text: String) -> Reply {
    send(
        shop.app
            .post(path)
            .bearer_auth(&shop.token)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .header("content-type", "application/json")
            .body(text),
    )
    .await
}

#[tokio::test]
async fn a_member_named_twice_is_refused_naming_it_and_nothing_is_charged() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let other = app.tenant(true).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let qr = shop.qr(&c).await;
    let ctx = |m: Uuid| json!({"merchant_id": m.to_string()}).to_string();

    let mine = ctx(shop.merchant());
    let cases = [
        // The last one would win for serde; a proxy or log line reading the first sees 1.
        (
            format!(r#""context": {mine}, "amount_minor": 1, "amount_minor": 4321"#),
            "/amount_minor",
        ),
        // Two contexts naming different merchants.
        (
            format!(
                r#""amount_minor": 5, "context": {}, "context": {mine}"#,
                ctx(other.merchant_id)
            ),
            "/context",
        ),
        // At any depth.
        (
            format!(
                r#""amount_minor": 5, "context": {mine}, "basket": {{"lines": [{{"sku": "A", "sku": "B", "quantity": 1, "unit_price_minor": 5, "extended_price_minor": 5}}]}}"#
            ),
            "/basket/lines/0/sku",
        ),
    ];
    for (tail, field) in cases {
        let r = post_text(&shop, "/payments", payment_text(&shop, &qr, &tail)).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{}",
            r.body
        );
        assert_eq!(issues(&r), one(field, "duplicate_member"));
    }

    assert_eq!(shop.balance(&c).await["actual_minor"], 10_000);
    // The QR nonce was not consumed either.
    let paid = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 4321)
        .await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.body["data"]["balance_after"]["actual_minor"], 5_679);
}

#[tokio::test]
async fn control_characters_are_refused_in_bodies_queries_and_paths_never_a_500() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let qr = shop.qr(&c).await;
    let line = |sku: &str, category: &str| {
        json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR",
               "basket": {"lines": [{"sku": sku, "category": category, "quantity": 1,
                                     "unit_price_minor": 100, "extended_price_minor": 100}]}})
    };
    let r = shop.post("/payments", line("SKU\u{0}1", "food")).await;
    r.assert_envelope();
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(issues(&r), one("/basket/lines/0/sku", "control_characters"));
    let r = shop.post("/payments", line("SKU-1", "fo\u{0}od")).await;
    assert_eq!(
        issues(&r),
        one("/basket/lines/0/category", "control_characters")
    );

    // A member the operation does not know is ignored, whatever its strings hold (its name
    // is still checked); the payment goes through.
    let mut unknown = line("SKU-1", "food");
    unknown["pos_extension"] = json!({"note": "till \u{0} 7", "raw": ["\u{7}"]});
    let r = shop.post("/payments", unknown).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut named = line("SKU-1", "food");
    named["pos\u{0}note"] = json!("x");
    let r = shop.post("/payments", named).await;
    assert_eq!(issues(&r), one("/pos\u{fffd}note", "control_characters"));

    let key = &shop.tenant.platform_key;
    let op = &shop.operator_key;
    let reads: Vec<(reqwest::RequestBuilder, &str)> = vec![
        (
            app.get("/webhooks/subscriptions?event_type=payment.completed%00")
                .header("x-api-key", key),
            "query:event_type",
        ),
        (
            app.get("/operator/dead-letters?queue=webhook%00deliver")
                .header("x-operator-key", op),
            "query:queue",
        ),
        (
            app.get("/operator/dead-letters?error=timed%0Aout")
                .header("x-operator-key", op),
            "query:error",
        ),
        (
            app.get("/topup/settlements/REF%00-1")
                .header("x-api-key", key),
            "path",
        ),
    ];
    for (req, field) in reads {
        let r = send(req).await;
        r.assert_envelope();
        assert_eq!(
            (r.status, r.code()),
            (400, "VALIDATION_ERROR"),
            "{}",
            r.body
        );
        assert_eq!(issues(&r), one(field, "control_characters"));
    }
    assert_eq!(shop.balance(&c).await["actual_minor"], 9_900);
}

/// Every string a route accepts, in its body, query or path, gets a control character (a
/// random one of Unicode's 65, at a random place in random text): each request is
/// VALIDATION_ERROR naming exactly that string. The routes and their strings come from the
/// live OpenAPI document, so a route added later is covered without touching this test.
#[tokio::test]
async fn every_string_of_every_route_refuses_control_characters() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let doc = send(app.get("/openapi.json")).await.body;
    let seed: u64 = std::env::var("EDGE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Uuid::new_v4().as_u128() as u64);
    let mut rng = Rng(seed | 1);
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let params: Vec<&Value> = op["parameters"]
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let with_ids = |target: Option<&str>, bad: &str| {
                let mut p = path.clone();
                for param in params.iter().filter(|p| p["in"] == "path") {
                    let name = param["name"].as_str().unwrap();
                    let value = if Some(name) == target {
                        bad.to_string()
                    } else {
                        Uuid::new_v4().to_string()
                    };
                    p = p.replace(&format!("{{{name}}}"), &value);
                }
                p
            };
            // Query strings and path segments.
            for param in &params {
                let name = param["name"].as_str().unwrap();
                let (url, field) = match param["in"].as_str() {
                    Some("query") if is_string(&doc, &param["schema"]) => (
                        format!("{}?{name}={}", with_ids(None, ""), rng.encoded_text()),
                        format!("query:{name}"),
                    ),
                    Some("path") => (with_ids(Some(name), &rng.encoded_text()), "path".into()),
                    _ => continue,
                };
                let r = send(authorised(
                    &shop,
                    op,
                    app.client.request(
                        method.to_uppercase().parse().unwrap(),
                        format!("{}{url}", app.url),
                    ),
                ))
                .await;
                assert_refused(&r, &field, &format!("{method} {url} (seed {seed})"));
                checked += 1;
            }
            // Every string member of the body, one at a time.
            let Some(schema) = op["requestBody"]["content"]
                .as_object()
                .and_then(|c| c.values().next())
                .map(|m| &m["schema"])
            else {
                continue;
            };
            let mut pointers = Vec::new();
            string_pointers(&doc, schema, &mut Vec::new(), &mut pointers, 0);
            for ptr in pointers {
                let body = body_with(&ptr, Value::String(rng.text()));
                let url = format!("{}{}", app.url, with_ids(None, ""));
                let req = app
                    .client
                    .request(method.to_uppercase().parse().unwrap(), url)
                    .header("Idempotency-Key", Uuid::new_v4().to_string())
                    .json(&body);
                let r = send(authorised(&shop, op, req)).await;
                let field = pointer(&ptr);
                assert_refused(
                    &r,
                    &field,
                    &format!("{method} {path} {field} (seed {seed})"),
                );
                checked += 1;
            }
        }
    }
    eprintln!("{checked} strings checked (seed {seed})");
    assert!(checked > 150, "only {checked} strings were found to check");
}

fn assert_refused(r: &Reply, field: &str, what: &str) {
    assert_eq!(
        (r.status, r.code()),
        (400, "VALIDATION_ERROR"),
        "{what}: {}",
        r.body
    );
    assert_eq!(
        r.field_issues(),
        one(field, "control_characters"),
        "{what}: {}",
        r.body
    );
}

/// The request with the credential the operation declares first.
fn authorised(
    shop: &Shop<'_>,
    op: &Value,
    req: reqwest::RequestBuilder,
) -> reqwest::RequestBuilder {
    let scheme = op["security"][0]
        .as_object()
        .and_then(|s| s.keys().next().cloned())
        .unwrap_or_default();
    match scheme.as_str() {
        "ApiKeyAuth" => req.header("x-api-key", &shop.tenant.platform_key),
        "PosTerminalJWT" => req.bearer_auth(&shop.token),
        "OperatorKey" => req.header("x-operator-key", &shop.operator_key),
        _ => req,
    }
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index,
}

fn pointer(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => format!("/{}", k.replace('~', "~0").replace('/', "~1")),
            Seg::Index => "/0".into(),
        })
        .collect()
}

/// The smallest JSON value holding `leaf` at `path`.
fn body_with(path: &[Seg], leaf: Value) -> Value {
    match path.split_first() {
        None => leaf,
        Some((Seg::Key(k), rest)) => json!({ k: body_with(rest, leaf) }),
        Some((Seg::Index, rest)) => json!([body_with(rest, leaf)]),
    }
}

fn resolve<'a>(doc: &'a Value, s: &'a Value) -> &'a Value {
    match s["$ref"].as_str() {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .map_or(s, |t| resolve(doc, t)),
        None => s,
    }
}

fn types(s: &Value) -> Vec<&str> {
    match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    }
}

fn is_string(doc: &Value, s: &Value) -> bool {
    let s = resolve(doc, s);
    types(s).contains(&"string")
        || ["anyOf", "oneOf", "allOf"]
            .iter()
            .filter_map(|k| s[k].as_array())
            .flatten()
            .any(|x| is_string(doc, x))
}

/// Every place in `schema` that holds a string, as paths from the body's root.
fn string_pointers(
    doc: &Value,
    schema: &Value,
    at: &mut Vec<Seg>,
    out: &mut Vec<Vec<Seg>>,
    depth: usize,
) {
    if depth > 6 {
        return;
    }
    let s = resolve(doc, schema);
    for k in ["anyOf", "oneOf", "allOf"] {
        for member in s[k].as_array().into_iter().flatten() {
            string_pointers(doc, member, at, out, depth + 1);
        }
    }
    let t = types(s);
    if t.contains(&"string") && !at.is_empty() && !out.iter().any(|p| pointer(p) == pointer(at)) {
        out.push(at.clone());
    }
    if let Some(props) = s["properties"].as_object() {
        for (name, p) in props {
            at.push(Seg::Key(name.clone()));
            string_pointers(doc, p, at, out, depth + 1);
            at.pop();
        }
    }
    if t.contains(&"array") {
        at.push(Seg::Index);
        string_pointers(doc, &s["items"], at, out, depth + 1);
        at.pop();
    }
    if s["additionalProperties"].is_object() {
        at.push(Seg::Key("any".into()));
        string_pointers(doc, &s["additionalProperties"], at, out, depth + 1);
        at.pop();
    }
}

/// A small xorshift generator: the run's seed is printed with any failure to replay it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn control(&mut self) -> char {
        let controls: Vec<char> = (0u32..=0x9f)
            .filter_map(char::from_u32)
            .filter(|c| c.is_control())
            .collect();
        controls[self.next() as usize % controls.len()]
    }

    /// Printable text with one control character somewhere in it.
    fn text(&mut self) -> String {
        let len = self.next() % 8;
        let mut s: String = (0..len)
            .map(|_| char::from(b'a' + (self.next() % 26) as u8))
            .collect();
        let at = (self.next() % (len + 1)) as usize;
        s.insert(at, self.control());
        s
    }

    /// `text`, percent-encoded for a URL.
    fn encoded_text(&mut self) -> String {
        self.text()
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }
}
