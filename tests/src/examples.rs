//! The document's request and response examples are real exchanges of this suite.
//! `WALLET_RECORD_EXAMPLES=<file>` appends every exchange `send` makes with an operation,
//! one JSON line each (operation, path and query parameters, request body, status, response
//! body), with secrets redacted; `tests/openapi_examples.py` picks one per operation into
//! `api/src/http/openapi/examples.json`, which the live document embeds.
use serde_json::{Map, Value, json};

/// Members whose values are credentials: a key, a terminal token, a webhook signing secret.
const SECRETS: &[&str] = &["raw_key", "token", "secret"];

pub fn record(method: &str, url: &reqwest::Url, sent: Option<&[u8]>, reply: &super::Reply) {
    let Ok(file) = std::env::var("WALLET_RECORD_EXAMPLES") else {
        return;
    };
    let Some(path) = url.path().strip_prefix("/v1") else {
        return;
    };
    let Some(op) = super::documented_errors::operation(method, path) else {
        return;
    };
    let mut params = Map::new();
    for (template, got) in op.segments.iter().zip(path.split('/')) {
        if let Some(name) = template.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            params.insert(name.into(), json!(got));
        }
    }
    for (name, value) in url.query_pairs() {
        params.insert(name.into_owned(), json!(value));
    }
    let request = sent
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .map(redacted)
        .unwrap_or(Value::Null);
    let line = json!({
        "operation": op.id,
        "parameters": params,
        "request": request,
        "status": reply.status,
        "response": redacted(reply.body.clone()),
    });
    super::documented_errors::append_line(&file, &line.to_string());
}

/// `value` with every credential replaced by its first characters and `…redacted`, so the
/// example still shows the credential's shape (`wk_test_…`, `eyJ…`) and never the credential.
fn redacted(mut value: Value) -> Value {
    redact(&mut value);
    value
}

fn redact(value: &mut Value) {
    match value {
        Value::Object(members) => {
            for (name, v) in members.iter_mut() {
                match v {
                    Value::String(s) if SECRETS.contains(&name.as_str()) => {
                        // A key's or secret's prefix ends at its last `_` (`wk_test_`); a
                        // JWT has none up front, so it keeps its first three characters.
                        let keep = s
                            .char_indices()
                            .take_while(|(i, _)| *i < 12)
                            .filter(|(_, c)| *c == '_')
                            .map(|(i, _)| i + 1)
                            .last()
                            .unwrap_or(3);
                        *s = format!("{}…redacted", s.get(..keep).unwrap_or_default());
                    }
                    _ => redact(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_keep_their_prefix_only() {
        let got = redacted(json!({"data": {
            "raw_key": "wk_test_0123456789abcdef0123456789abcdef",
            "token": "eyJhbGciOiJIUzI1NiJ9.e30.sig",
            "items": [{"secret": "whsec_abcdef"}],
            "key_prefix": "wk_test_0123",
        }}));
        assert_eq!(got["data"]["raw_key"], "wk_test_…redacted");
        assert_eq!(got["data"]["token"], "eyJ…redacted");
        assert_eq!(got["data"]["items"][0]["secret"], "whsec_…redacted");
        assert_eq!(got["data"]["key_prefix"], "wk_test_0123");
    }
}
