//! Each operation's request and response example in the live document. They are real
//! exchanges of the test suite, secrets redacted (recorded with `WALLET_RECORD_EXAMPLES`,
//! one per operation picked by `tests/openapi_examples.py` into `examples.json`); the suite
//! checks each against the schemas it illustrates, so an example cannot drift from the
//! contract unnoticed.
use serde_json::{Map, Value};

const EXAMPLES: &str = include_str!("examples.json");

/// Puts each operation's recorded exchange on its parameters (`example`), its JSON request
/// body and the response of the recorded status.
pub fn publish(doc: &mut Value) {
    let examples: Map<String, Value> =
        serde_json::from_str(EXAMPLES).expect("examples.json is a JSON object");
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for op in paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
    {
        let Some(example) = op
            .get("operationId")
            .and_then(Value::as_str)
            .and_then(|id| examples.get(id))
        else {
            continue;
        };
        for p in op
            .get_mut("parameters")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(value) = p["name"]
                .as_str()
                .and_then(|name| example["parameters"].get(name))
            else {
                continue;
            };
            p["example"] = typed(value, &p["schema"]);
        }
        if !example["request"].is_null()
            && let Some(media) = json_media(op.get_mut("requestBody"))
        {
            media.insert("example".into(), example["request"].clone());
        }
        let status = example["status"].to_string();
        if let Some(media) = json_media(op.get_mut("responses").and_then(|r| r.get_mut(&status))) {
            media.insert("example".into(), example["response"].clone());
        }
    }
}

/// The JSON media type object of a request body or response (poem-openapi names it
/// `application/json; charset=utf-8`).
fn json_media(body: Option<&mut Value>) -> Option<&mut Map<String, Value>> {
    body?
        .get_mut("content")?
        .as_object_mut()?
        .iter_mut()
        .find(|(media_type, _)| media_type.starts_with("application/json"))?
        .1
        .as_object_mut()
}

/// Whether the request body or response has a JSON example.
#[cfg(test)]
fn has_example(body: Option<&Value>) -> bool {
    body.and_then(|b| b["content"].as_object())
        .into_iter()
        .flatten()
        .any(|(media_type, m)| {
            media_type.starts_with("application/json") && m.get("example").is_some()
        })
}

/// A parameter's value as recorded (URL text) in the type its schema declares.
fn typed(value: &Value, schema: &Value) -> Value {
    let text = value.as_str().unwrap_or_default();
    let parsed = match schema["type"].as_str() {
        Some("integer") => text.parse::<i64>().ok().map(Value::from),
        Some("boolean") => text.parse::<bool>().ok().map(Value::from),
        _ => None,
    };
    parsed.unwrap_or_else(|| value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation shows a response (a success, unless it never succeeds), and the
    /// request too wherever it has a body or path parameters to show.
    #[test]
    fn every_operation_has_a_request_and_a_response_example() {
        let doc = crate::http::openapi::build().document;
        let mut missing = vec![];
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in item.as_object().into_iter().flatten() {
                let id = op["operationId"].as_str().unwrap_or(path);
                let responded = op["responses"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .any(|(_, r)| has_example(Some(r)));
                if !responded {
                    missing.push(format!("{id}: response"));
                }
                if op.get("requestBody").is_some() && !has_example(op.get("requestBody")) {
                    missing.push(format!("{id}: request body"));
                }
                for p in op["parameters"].as_array().into_iter().flatten() {
                    if p["in"] == "path" && p.get("example").is_none() {
                        missing.push(format!("{id} ({method} {path}): {}", p["name"]));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "no example for {missing:#?}");
    }
}
