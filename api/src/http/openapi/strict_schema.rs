//! States `strict_json`'s rule in the published document: no request string and no member
//! name carries a control character. Every string of a request body without a pattern or
//! an enum of its own gets `validate::NO_CONTROL_CHARS_PATTERN`, and every object of one
//! gets it as `propertyNames` (unknown members are ignored, but their names are still
//! read). Of schemas a response also uses only the member names are restricted (no name
//! the service sends has one either): what the service sends in strings is not what it
//! accepts.
use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::domain::validate::NO_CONTROL_CHARS_PATTERN;

const REF_PREFIX: &str = "#/components/schemas/";

pub fn publish(doc: &mut Value) {
    let mut requests = BTreeSet::new();
    let mut responses = BTreeSet::new();
    if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
        for op in paths
            .values()
            .filter_map(Value::as_object)
            .flat_map(|item| item.values())
        {
            for media in op
                .pointer("/requestBody/content")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|c| c.values())
            {
                refs_in(&media["schema"], &mut requests);
            }
            if let Some(rs) = op.get("responses") {
                refs_in(rs, &mut responses);
            }
        }
    }
    let schemas = doc
        .pointer("/components/schemas")
        .cloned()
        .unwrap_or_default();
    let requests = closure(&schemas, requests);
    let responses = closure(&schemas, responses);
    for name in requests.difference(&responses) {
        if let Some(s) = doc.pointer_mut(&format!("/components/schemas/{name}")) {
            restrict(s);
        }
    }
    // A schema both ways still has its member names read: no name the service sends has
    // a control character either.
    for name in requests.intersection(&responses) {
        if let Some(Value::Object(s)) = doc.pointer_mut(&format!("/components/schemas/{name}"))
            && s.contains_key("properties")
        {
            s.entry("propertyNames")
                .or_insert_with(|| json!({ "pattern": NO_CONTROL_CHARS_PATTERN }));
        }
    }
    // Bodies given inline (no component of their own).
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for op in paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|item| item.values_mut())
        {
            // The path and the query are refused whole when they carry one
            // (`middleware::control_chars_in`).
            for param in op
                .get_mut("parameters")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if matches!(param["in"].as_str(), Some("path" | "query"))
                    && let Some(schema) = param.get_mut("schema")
                {
                    restrict(schema);
                }
            }
            if let Some(content) = op
                .pointer_mut("/requestBody/content")
                .and_then(Value::as_object_mut)
            {
                for media in content.values_mut() {
                    if let Some(s) = media.get_mut("schema") {
                        restrict(s);
                    }
                }
            }
        }
    }
}

/// Every component `value` refers to, directly.
fn refs_in(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(REF_PREFIX))
            {
                out.insert(name.to_string());
            }
            map.values().for_each(|v| refs_in(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs_in(v, out)),
        _ => {}
    }
}

/// `names` and every component they reach.
fn closure(schemas: &Value, mut names: BTreeSet<String>) -> BTreeSet<String> {
    let mut todo: Vec<String> = names.iter().cloned().collect();
    while let Some(name) = todo.pop() {
        let mut found = BTreeSet::new();
        refs_in(&schemas[name.as_str()], &mut found);
        for f in found {
            if names.insert(f.clone()) {
                todo.push(f);
            }
        }
    }
    names
}

fn is_type(schema: &serde_json::Map<String, Value>, ty: &str) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == ty,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == ty),
        _ => false,
    }
}

/// Adds the rule to `schema` and every schema written inside it (not behind a `$ref`:
/// components are restricted by name).
fn restrict(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if map.contains_key("$ref") {
        return;
    }
    if is_type(map, "string") && !map.contains_key("pattern") && !map.contains_key("enum") {
        map.insert("pattern".into(), NO_CONTROL_CHARS_PATTERN.into());
    }
    if (is_type(map, "object") || map.contains_key("properties"))
        && !map.contains_key("propertyNames")
    {
        map.insert(
            "propertyNames".into(),
            json!({ "pattern": NO_CONTROL_CHARS_PATTERN }),
        );
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(restrict);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = map.get_mut(key) {
            restrict(v);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(vs)) = map.get_mut(key) {
            vs.iter_mut().for_each(restrict);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_only_schemas_state_the_rule_and_shared_ones_only_for_member_names() {
        let mut doc = json!({
            "paths": {"/x": {"post": {
                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Req"}}}},
                "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Res"}}}}}
            }}},
            "components": {"schemas": {
                "Req": {"type": "object", "properties": {
                    "note": {"type": "string"},
                    "state": {"type": "string", "enum": ["A"]},
                    "inner": {"$ref": "#/components/schemas/Inner"},
                    "shared": {"$ref": "#/components/schemas/Shared"}
                }},
                "Inner": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": ["string", "null"]}}}},
                "Res": {"type": "object", "properties": {"shared": {"$ref": "#/components/schemas/Shared"}}},
                "Shared": {"type": "object", "properties": {"text": {"type": "string"}}}
            }}
        });
        publish(&mut doc);
        let s = &doc["components"]["schemas"];
        assert_eq!(
            s["Req"]["propertyNames"]["pattern"],
            NO_CONTROL_CHARS_PATTERN
        );
        assert_eq!(
            s["Req"]["properties"]["note"]["pattern"],
            NO_CONTROL_CHARS_PATTERN
        );
        assert!(s["Req"]["properties"]["state"].get("pattern").is_none());
        assert_eq!(
            s["Inner"]["properties"]["tags"]["items"]["pattern"],
            NO_CONTROL_CHARS_PATTERN
        );
        assert_eq!(
            s["Shared"]["propertyNames"]["pattern"],
            NO_CONTROL_CHARS_PATTERN
        );
        assert!(s["Shared"]["properties"]["text"].get("pattern").is_none());
        assert!(s["Res"].get("propertyNames").is_none());
    }
}
