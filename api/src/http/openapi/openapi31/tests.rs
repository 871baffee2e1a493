//! The 3.0 -> 3.1 conversion, case by case.
use serde_json::{Map, Value, json};

use super::{JSON_SCHEMA_DIALECT, convert};

/// Wraps a schema in a minimal document so tests go through `convert`.
fn convert_component(schema: Value) -> Value {
    let mut doc = json!({
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {},
        "components": {"schemas": {}}
    });
    doc["components"]["schemas"]["S"] = schema;
    convert(doc)["components"]["schemas"]["S"].take()
}

#[test]
fn sets_version_and_dialect() {
    let doc = convert(json!({
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {}
    }));
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["jsonSchemaDialect"], JSON_SCHEMA_DIALECT);
    assert_eq!(doc["info"], json!({"title": "t", "version": "1"}));
}

#[test]
fn nullable_primitive_gains_null_type() {
    let schema = convert_component(json!({
        "type": "string",
        "format": "date-time",
        "nullable": true
    }));
    assert_eq!(
        schema,
        json!({"type": ["string", "null"], "format": "date-time"})
    );
}

#[test]
fn nullable_false_is_dropped() {
    let schema = convert_component(json!({"type": "integer", "nullable": false}));
    assert_eq!(schema, json!({"type": "integer"}));
}

#[test]
fn nullable_ref_is_wrapped_in_any_of() {
    let schema = convert_component(json!({
        "$ref": "#/components/schemas/Other",
        "nullable": true
    }));
    assert_eq!(
        schema,
        json!({"anyOf": [
            {"$ref": "#/components/schemas/Other"},
            {"type": "null"}
        ]})
    );
}

#[test]
fn nullable_all_of_keeps_annotations_on_wrapper() {
    // The shape poem-openapi emits for a described `Option<Object>` field.
    let schema = convert_component(json!({
        "description": "owner",
        "readOnly": true,
        "allOf": [
            {"$ref": "#/components/schemas/User"},
            {"description": "owner", "readOnly": true, "nullable": true}
        ],
        "nullable": true
    }));
    assert_eq!(
        schema,
        json!({
            "description": "owner",
            "readOnly": true,
            "anyOf": [
                {"$ref": "#/components/schemas/User"},
                {"type": "null"}
            ]
        })
    );
}

#[test]
fn nullable_enum_accepts_null() {
    let schema = convert_component(json!({
        "type": "string",
        "enum": ["a", "b"],
        "nullable": true
    }));
    assert_eq!(
        schema,
        json!({"type": ["string", "null"], "enum": ["a", "b", null]})
    );
}

#[test]
fn exclusive_bounds_become_numeric() {
    let schema = convert_component(json!({
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": true,
        "maximum": 100,
        "exclusiveMaximum": true
    }));
    assert_eq!(
        schema,
        json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100})
    );
}

#[test]
fn inclusive_bounds_drop_false_flags() {
    let schema = convert_component(json!({
        "type": "integer",
        "minimum": 1,
        "exclusiveMinimum": false,
        "maximum": 9,
        "exclusiveMaximum": false
    }));
    assert_eq!(
        schema,
        json!({"type": "integer", "minimum": 1, "maximum": 9})
    );
}

#[test]
fn schema_example_becomes_examples() {
    let schema = convert_component(json!({"type": "string", "example": "abc"}));
    assert_eq!(schema, json!({"type": "string", "examples": ["abc"]}));
}

#[test]
fn nested_schemas_are_converted() {
    let schema = convert_component(json!({
        "type": "object",
        "additionalProperties": {"type": "integer", "nullable": true},
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "example": "t"}},
            "choice": {"oneOf": [{"type": "number", "minimum": 0, "exclusiveMinimum": true}]}
        }
    }));
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "additionalProperties": {"type": ["integer", "null"]},
            "properties": {
                "tags": {"type": "array", "items": {"type": "string", "examples": ["t"]}},
                "choice": {"oneOf": [{"type": "number", "exclusiveMinimum": 0}]}
            }
        })
    );
}

#[test]
fn property_names_are_not_keywords() {
    let schema = convert_component(json!({
        "type": "object",
        "required": ["nullable", "example"],
        "properties": {
            "nullable": {"type": "boolean"},
            "example": {"type": "string"}
        },
        "example": {"nullable": true, "example": "x"}
    }));
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "required": ["nullable", "example"],
            "properties": {
                "nullable": {"type": "boolean"},
                "example": {"type": "string"}
            },
            "examples": [{"nullable": true, "example": "x"}]
        })
    );
}

#[test]
fn parameter_and_media_type_examples_are_untouched() {
    let doc = convert(json!({
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/items/{id}": {
                "get": {
                    "parameters": [{
                        "name": "id",
                        "in": "path",
                        "required": true,
                        "example": 7,
                        "schema": {"type": "integer", "example": 7, "nullable": true}
                    }],
                    "responses": {
                        "200": {
                            "description": "ok",
                            "headers": {
                                "x-rate": {"example": 5, "schema": {"type": "integer", "example": 5}}
                            },
                            "content": {
                                "application/json": {
                                    "example": {"id": 7},
                                    "schema": {"type": "object", "example": {"id": 7}}
                                }
                            }
                        }
                    }
                }
            }
        }
    }));
    let operation = &doc["paths"]["/items/{id}"]["get"];
    let parameter = &operation["parameters"][0];
    assert_eq!(parameter["example"], 7);
    assert_eq!(
        parameter["schema"],
        json!({"type": ["integer", "null"], "examples": [7]})
    );
    let response = &operation["responses"]["200"];
    assert_eq!(response["headers"]["x-rate"]["example"], 5);
    assert_eq!(
        response["headers"]["x-rate"]["schema"],
        json!({"type": "integer", "examples": [5]})
    );
    let media = &response["content"]["application/json"];
    assert_eq!(media["example"], json!({"id": 7}));
    assert_eq!(
        media["schema"],
        json!({"type": "object", "examples": [{"id": 7}]})
    );
}

#[test]
fn annotations_and_extensions_are_kept() {
    let original = json!({
        "type": "object",
        "title": "T",
        "description": "d",
        "default": {},
        "deprecated": true,
        "discriminator": {"propertyName": "kind"},
        "xml": {"name": "t"},
        "externalDocs": {"url": "https://example.com"},
        "x-internal": {"nullable": true}
    });
    assert_eq!(convert_component(original.clone()), original);
}

#[test]
fn rewritten_keywords_keep_their_position() {
    let schema = convert_component(json!({
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": true,
        "example": 1,
        "description": "d"
    }));
    let keys: Vec<&str> = schema
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = vec!["type", "exclusiveMinimum", "examples", "description"];
    // Without serde_json's `preserve_order` maps are sorted, and there is
    // no position to keep.
    let mut probe = Map::new();
    probe.insert("b".into(), Value::Null);
    probe.insert("a".into(), Value::Null);
    if probe.keys().next().is_some_and(|key| key == "a") {
        expected.sort_unstable();
    }
    assert_eq!(keys, expected);
}

#[test]
fn conversion_is_idempotent() {
    let doc = json!({
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {},
        "components": {"schemas": {
            "A": {"$ref": "#/components/schemas/B", "nullable": true},
            "B": {"type": "integer", "minimum": 0, "exclusiveMinimum": true, "example": 1}
        }}
    });
    let once = convert(doc);
    assert_eq!(convert(once.clone()), once);
}

#[test]
fn a_described_ref_loses_its_all_of_wrapper() {
    let out = convert_component(json!({
        "type": "object",
        "properties": {
            "customer": {
                "allOf": [
                    {"$ref": "#/components/schemas/IdentityCredentialBody"},
                    {"description": "The customer."}
                ],
                "description": "The customer."
            },
            "kept": {
                "allOf": [
                    {"$ref": "#/components/schemas/A"},
                    {"$ref": "#/components/schemas/B"}
                ]
            }
        }
    }));
    assert_eq!(
        out["properties"]["customer"],
        json!({"$ref": "#/components/schemas/IdentityCredentialBody", "description": "The customer."})
    );
    assert_eq!(
        out["properties"]["kept"]["allOf"].as_array().unwrap().len(),
        2
    );
}
