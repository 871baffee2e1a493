//! Validates documents against the official OpenAPI 3.1 JSON Schema.
//!
//! The API contract is OpenAPI 3.1.0, so the served document is checked with
//! a real JSON Schema validator rather than by spot-checking fields. The
//! official schema (`data/oas-3.1-schema.json`, OpenAPI Initiative,
//! Apache-2.0, shipped unchanged from openapi-spec-validator 0.9.0)
//! deliberately accepts any object as a Schema Object, so every Schema Object
//! is additionally checked against the JSON Schema 2020-12 meta-schema and for
//! OpenAPI 3.0 keywords that 2020-12 would silently ignore.
//!
//! Everything is resolved offline: the OAS schema only references itself and
//! the draft 2020-12 meta-schemas that the `jsonschema` crate bundles.

use std::collections::HashSet;
use std::sync::OnceLock;

use jsonschema::Validator;
use serde_json::Value;

const OAS_31_SCHEMA: &str = include_str!("../data/oas-3.1-schema.json");

const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Validates `doc` as an OpenAPI 3.1 document.
///
/// # Errors
///
/// Every problem found, each prefixed with the JSON Pointer of the offending
/// value in `doc`.
pub fn validate(doc: &Value) -> Result<(), Vec<String>> {
    let mut errors: Vec<String> = oas_validator()
        .iter_errors(doc)
        .map(|error| {
            format!(
                "{}: {error} (schema path {})",
                display_pointer(error.instance_path().as_str()),
                error.schema_path(),
            )
        })
        .collect();

    let meta = jsonschema::draft202012::meta::validator();
    for (pointer, schema) in schema_objects(doc) {
        for error in meta.iter_errors(schema) {
            errors.push(format!(
                "{}: not a valid JSON Schema 2020-12 schema: {error}",
                display_pointer(&format!("{pointer}{}", error.instance_path().as_str())),
            ));
        }
        find_openapi30_keywords(schema, &pointer, &mut errors);
    }

    // The 2020-12 meta-schema is split into vocabularies that each re-check
    // the same node, so one mistake can otherwise be reported many times.
    let mut seen = HashSet::new();
    errors.retain(|error| seen.insert(error.clone()));

    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn oas_validator() -> &'static Validator {
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let schema: Value =
            serde_json::from_str(OAS_31_SCHEMA).expect("bundled OAS 3.1 schema is valid JSON");
        jsonschema::draft202012::new(&schema).expect("bundled OAS 3.1 schema compiles offline")
    })
}

fn display_pointer(pointer: &str) -> &str {
    if pointer.is_empty() {
        "<root>"
    } else {
        pointer
    }
}

fn child_pointer(parent: &str, token: &str) -> String {
    format!("{parent}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// Every top-level Schema Object in the document, with its JSON Pointer.
///
/// Nested subschemas are reached through their root, both by the
/// meta-schema and by [`find_openapi30_keywords`].
fn schema_objects(doc: &Value) -> Vec<(String, &Value)> {
    let mut found = Vec::new();
    if let Some(paths) = doc.get("paths") {
        for (pointer, item) in entries(paths, "/paths", true) {
            path_item_schemas(item, &pointer, &mut found);
        }
    }
    if let Some(webhooks) = doc.get("webhooks") {
        for (pointer, item) in entries(webhooks, "/webhooks", true) {
            path_item_schemas(item, &pointer, &mut found);
        }
    }
    if let Some(Value::Object(components)) = doc.get("components") {
        for (kind, map) in components {
            let base = child_pointer("/components", kind);
            for (pointer, value) in entries(map, &base, false) {
                match kind.as_str() {
                    "schemas" => found.push((pointer, value)),
                    "responses" => response_schemas(value, &pointer, &mut found),
                    "parameters" | "headers" => {
                        parameter_schemas(value, &pointer, &mut found);
                    }
                    "requestBodies" => content_schemas(value, &pointer, &mut found),
                    "callbacks" => callback_schemas(value, &pointer, &mut found),
                    "pathItems" => path_item_schemas(value, &pointer, &mut found),
                    _ => {}
                }
            }
        }
    }
    found
}

/// Entries of an object with their pointers. `x-` keys are skipped where the
/// object is an OpenAPI object with patterned fields, since they are
/// Specification Extensions there and not entries.
fn entries<'a>(map: &'a Value, pointer: &str, skip_extensions: bool) -> Vec<(String, &'a Value)> {
    let Value::Object(map) = map else {
        return Vec::new();
    };
    map.iter()
        .filter(|(key, _)| !(skip_extensions && key.starts_with("x-")))
        .map(|(key, value)| (child_pointer(pointer, key), value))
        .collect()
}

fn items<'a>(array: &'a Value, pointer: &str) -> Vec<(String, &'a Value)> {
    let Value::Array(array) = array else {
        return Vec::new();
    };
    array
        .iter()
        .enumerate()
        .map(|(index, value)| (format!("{pointer}/{index}"), value))
        .collect()
}

fn path_item_schemas<'a>(item: &'a Value, pointer: &str, found: &mut Vec<(String, &'a Value)>) {
    let Value::Object(item) = item else {
        return;
    };
    for (key, value) in item {
        let pointer = child_pointer(pointer, key);
        if key == "parameters" {
            for (pointer, parameter) in items(value, &pointer) {
                parameter_schemas(parameter, &pointer, found);
            }
        } else if HTTP_METHODS.contains(&key.as_str()) {
            operation_schemas(value, &pointer, found);
        }
    }
}

fn operation_schemas<'a>(
    operation: &'a Value,
    pointer: &str,
    found: &mut Vec<(String, &'a Value)>,
) {
    let Value::Object(operation) = operation else {
        return;
    };
    for (key, value) in operation {
        let pointer = child_pointer(pointer, key);
        match key.as_str() {
            "parameters" => {
                for (pointer, parameter) in items(value, &pointer) {
                    parameter_schemas(parameter, &pointer, found);
                }
            }
            "requestBody" => content_schemas(value, &pointer, found),
            "responses" => {
                for (pointer, response) in entries(value, &pointer, true) {
                    response_schemas(response, &pointer, found);
                }
            }
            "callbacks" => {
                for (pointer, callback) in entries(value, &pointer, false) {
                    callback_schemas(callback, &pointer, found);
                }
            }
            _ => {}
        }
    }
}

fn callback_schemas<'a>(callback: &'a Value, pointer: &str, found: &mut Vec<(String, &'a Value)>) {
    for (pointer, item) in entries(callback, pointer, true) {
        path_item_schemas(item, &pointer, found);
    }
}

fn response_schemas<'a>(response: &'a Value, pointer: &str, found: &mut Vec<(String, &'a Value)>) {
    if let Some(headers) = response.get("headers") {
        for (pointer, header) in entries(headers, &child_pointer(pointer, "headers"), false) {
            parameter_schemas(header, &pointer, found);
        }
    }
    content_schemas(response, pointer, found);
}

/// Parameter and Header Objects: a `schema`, or a `content` map.
fn parameter_schemas<'a>(
    parameter: &'a Value,
    pointer: &str,
    found: &mut Vec<(String, &'a Value)>,
) {
    if let Some(schema) = parameter.get("schema") {
        found.push((child_pointer(pointer, "schema"), schema));
    }
    content_schemas(parameter, pointer, found);
}

fn content_schemas<'a>(holder: &'a Value, pointer: &str, found: &mut Vec<(String, &'a Value)>) {
    let Some(content) = holder.get("content") else {
        return;
    };
    for (pointer, media_type) in entries(content, &child_pointer(pointer, "content"), false) {
        if let Some(schema) = media_type.get("schema") {
            found.push((child_pointer(&pointer, "schema"), schema));
        }
        if let Some(encodings) = media_type.get("encoding") {
            for (pointer, encoding) in
                entries(encodings, &child_pointer(&pointer, "encoding"), false)
            {
                if let Some(headers) = encoding.get("headers") {
                    for (pointer, header) in
                        entries(headers, &child_pointer(&pointer, "headers"), false)
                    {
                        parameter_schemas(header, &pointer, found);
                    }
                }
            }
        }
    }
}

/// Reports 3.0-only keywords in `schema` and all its subschemas.
///
/// JSON Schema 2020-12 ignores unknown keywords, so a leftover `nullable`
/// would pass the meta-schema while silently changing what the contract
/// accepts. Boolean exclusive bounds are also caught by the meta-schema; they
/// are named here too so the message says what went wrong.
fn find_openapi30_keywords(schema: &Value, pointer: &str, errors: &mut Vec<String>) {
    let Value::Object(map) = schema else {
        return;
    };
    if map.contains_key("nullable") {
        errors.push(format!(
            "{}: OpenAPI 3.0 keyword `nullable` in a 3.1 schema; add \"null\" to `type` instead",
            child_pointer(pointer, "nullable"),
        ));
    }
    for bound in ["exclusiveMinimum", "exclusiveMaximum"] {
        if map.get(bound).is_some_and(Value::is_boolean) {
            errors.push(format!(
                "{}: OpenAPI 3.0 boolean `{bound}` in a 3.1 schema; it must be the bound itself",
                child_pointer(pointer, bound),
            ));
        }
    }
    for (key, value) in map {
        let pointer = child_pointer(pointer, key);
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                for (pointer, subschema) in entries(value, &pointer, false) {
                    find_openapi30_keywords(subschema, &pointer, errors);
                }
            }
            "items" | "prefixItems" | "allOf" | "anyOf" | "oneOf" if value.is_array() => {
                for (pointer, subschema) in items(value, &pointer) {
                    find_openapi30_keywords(subschema, &pointer, errors);
                }
            }
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "contentSchema" => find_openapi30_keywords(value, &pointer, errors),
            _ => {}
        }
    }
}
