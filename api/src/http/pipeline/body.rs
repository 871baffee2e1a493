//! Request bodies: parsed with serde (so a type error names its field as a JSON pointer),
//! then checked by the DTO's `Validate`, which reports every bad field at once. The schema
//! in the OpenAPI document comes from the same DTO's `Object` derive.
use poem::{Request, RequestBody};
use poem_openapi::{
    impl_apirequest_for_payload,
    payload::{ParsePayload, Payload},
    registry::{MetaSchemaRef, Registry},
    types::Type,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{
    domain::validate::Errors,
    error::{ApiError, FieldError},
};

/// Domain checks on a parsed body. Implementations push one error per bad field.
pub trait Validate {
    fn validate(&self, errs: &mut Errors);
}

/// A validated JSON body plus the parsed JSON it came from (for idempotency fingerprints).
pub struct JsonBody<T> {
    pub value: T,
    pub json: Value,
}

impl<T: Type> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = "application/json; charset=utf-8";

    fn check_content_type(content_type: &str) -> bool {
        is_json(content_type)
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

/// `application/json` or any `application/*+json`.
pub fn is_json(content_type: &str) -> bool {
    matches!(content_type.parse::<mime::Mime>(), Ok(m) if m.type_() == "application"
        && (m.subtype() == "json" || m.suffix().is_some_and(|s| s == "json")))
}

impl<T: DeserializeOwned + Validate + Send> ParsePayload for JsonBody<T> {
    const IS_REQUIRED: bool = true;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        use poem::FromRequest;
        let bytes = Vec::<u8>::from_request(request, body).await?;
        parse(&bytes).map_err(poem::Error::from)
    }
}

impl_apirequest_for_payload!(JsonBody<T>, T: DeserializeOwned + Validate + Type + Send);

/// Parses and validates a body. Public so the rules can be tested without a server.
pub fn parse<T: DeserializeOwned + Validate>(bytes: &[u8]) -> Result<JsonBody<T>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::field("/", "required", "a JSON body is required"));
    }
    let json = crate::http::pipeline::strict_json::parse(bytes)?;
    if !json.is_object() {
        return Err(ApiError::field(
            "/",
            "invalid_type",
            "the body must be a JSON object",
        ));
    }
    // Members the type does not read are ignored; their pointers are noted as it reads, so
    // the control-character rule skips exactly them (see `strict_json`). The rule is
    // reported first when the type read the whole body, or stopped only at an object's end
    // for a member it lacks; a value of the wrong type stops it midway, where what it did
    // not reach is unknown, and that error is the one reported.
    let mut ignored = Vec::new();
    let read: Result<T, _> = {
        let mut note = |p: serde_ignored::Path| ignored.push(ignored_pointer(&p));
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(&json, &mut note))
    };
    let read_through = match &read {
        Ok(_) => true,
        Err(e) => e.inner().to_string().starts_with("missing field"),
    };
    if read_through
        && let Some(field) = crate::http::pipeline::strict_json::control_chars_in(&json, &ignored)
    {
        return Err(ApiError::validation(vec![field]));
    }
    let value = read.map_err(|e| {
        let pointer = pointer(e.path());
        ApiError::validation(vec![classify(&pointer, &e.into_inner().to_string())])
    })?;
    let mut errs = Errors::default();
    value.validate(&mut errs);
    errs.finish()?;
    Ok(JsonBody { value, json })
}

/// The JSON pointer of a member serde_ignored reports (its `Some`/newtype steps are not
/// JSON nesting).
fn ignored_pointer(path: &serde_ignored::Path) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => {
            let mut at = ignored_pointer(parent);
            crate::http::pipeline::strict_json::push_pointer_segment(&mut at, &index.to_string());
            at
        }
        Path::Map { parent, key } => {
            let mut at = ignored_pointer(parent);
            crate::http::pipeline::strict_json::push_pointer_segment(&mut at, key);
            at
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_pointer(parent),
    }
}

fn pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => crate::http::pipeline::strict_json::push_pointer_segment(
                &mut out,
                &index.to_string(),
            ),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                crate::http::pipeline::strict_json::push_pointer_segment(&mut out, key)
            }
            Segment::Unknown => out.push_str("/?"),
        }
    }
    out
}

/// Turns serde's message into a field error with a stable `issue`.
fn classify(pointer: &str, message: &str) -> FieldError {
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or_default();
        return FieldError::new(format!("{pointer}/{name}"), "required", "is required");
    }
    let field = if pointer.is_empty() {
        "/".to_string()
    } else {
        pointer.to_string()
    };
    let integer = [
        "expected i64",
        "expected i32",
        "expected u64",
        "expected u32",
        "expected u16",
        "expected u8",
    ]
    .iter()
    .any(|t| message.contains(t));
    if integer {
        return FieldError::new(
            field,
            "must_be_integer",
            "must be a JSON integer (minor units): no decimals, strings or exponents",
        );
    }
    if message.starts_with("unknown variant") {
        return FieldError::new(field, "invalid_value", message);
    }
    FieldError::new(field, "invalid_type", message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::validate;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    struct Pay {
        amount_minor: i64,
        currency: String,
        wallet_id: String,
    }

    impl Validate for Pay {
        fn validate(&self, e: &mut Errors) {
            validate::min_amount(e, "/amount_minor", self.amount_minor, 1);
            validate::currency(e, "/currency", &self.currency);
            validate::uuid(e, "/wallet_id", &self.wallet_id);
        }
    }

    fn fields(r: Result<JsonBody<Pay>, ApiError>) -> Vec<(String, String)> {
        let body = r.err().expect("must fail").to_body();
        assert_eq!(body["code"], "VALIDATION_ERROR");
        body["details"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["field"].as_str().unwrap().to_string(),
                    f["issue"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    const ID: &str = "0191c1c0-7f3e-7a44-b1a6-1f2d3c4b5a69";

    #[derive(Deserialize, Debug)]
    struct Presents {
        credential: Documented<crate::http::payments::PaymentCredential>,
    }

    impl Validate for Presents {
        fn validate(&self, _: &mut Errors) {}
    }

    /// A union carried raw keeps what its variants declare and ignores the rest, as any
    /// body does: a control character inside an unknown member is not read, so not refused.
    #[test]
    fn a_documented_union_ignores_members_no_variant_declares() {
        let b = r#"{"credential": {"type": "qr", "qr_payload": "wq1.x", "note": ["a\u0001"]}}"#;
        let parsed = parse::<Presents>(b.as_bytes()).expect("unknown members are ignored");
        assert_eq!(
            parsed.value.credential.raw,
            serde_json::json!({"type": "qr", "qr_payload": "wq1.x"})
        );
        let b = r#"{"credential": {"type": "qr", "qr_payload": "wq1.\u0001"}}"#;
        assert!(
            parse::<Presents>(b.as_bytes()).is_err(),
            "a declared member is read"
        );
    }

    #[test]
    fn a_control_character_is_refused_in_a_member_read_and_ignored_in_one_not_read() {
        let body = |extra: &str| {
            format!(r#"{{"amount_minor": 5, "currency": "EUR", "wallet_id": "{ID}"{extra}}}"#)
        };
        assert_eq!(
            fields(parse::<Pay>(
                body("").replace("EUR", "EU\\u0000").as_bytes()
            )),
            [("/currency".into(), "control_characters".into())]
        );
        // Unknown members are ignored, whatever their strings hold; their names are not.
        let ok = parse::<Pay>(
            body(r#", "pos_note": "a\u0000b", "pos": {"raw": ["\u0007"]}"#).as_bytes(),
        );
        assert!(ok.is_ok(), "{:?}", ok.err().map(|e| e.to_body()));
        assert_eq!(
            fields(parse::<Pay>(body(r#", "pos\u0000": 1"#).as_bytes())),
            [("/pos\u{fffd}".into(), "control_characters".into())]
        );
        // A value of the wrong type stops the reading midway: its error is the one reported,
        // not a string in a member the reading never reached.
        let midway = format!(
            r#"{{"amount_minor": 5.5, "currency": "EUR", "wallet_id": "{ID}", "zz": {{"a\u0000": 1}}}}"#
        );
        assert_eq!(
            fields(parse::<Pay>(midway.as_bytes())),
            [("/amount_minor".into(), "must_be_integer".into())]
        );
    }

    #[test]
    fn amounts_must_be_json_integers() {
        for amount in ["10.5", "\"100\"", "1e3", "100.0"] {
            let b =
                format!(r#"{{"amount_minor": {amount}, "currency": "EUR", "wallet_id": "{ID}"}}"#);
            assert_eq!(
                fields(parse::<Pay>(b.as_bytes())),
                vec![("/amount_minor".into(), "must_be_integer".into())],
                "{amount}"
            );
        }
    }

    #[test]
    fn domain_rules_report_every_bad_field() {
        let b = r#"{"amount_minor": 0, "currency": "EURO", "wallet_id": "nope"}"#;
        assert_eq!(
            fields(parse::<Pay>(b.as_bytes())),
            vec![
                ("/amount_minor".into(), "too_small".into()),
                ("/currency".into(), "invalid_currency".into()),
                ("/wallet_id".into(), "invalid_uuid".into()),
            ]
        );
    }

    #[test]
    fn missing_and_malformed_bodies_are_validation_errors() {
        assert_eq!(
            fields(parse::<Pay>(br#"{"amount_minor": 1, "currency": "EUR"}"#)),
            vec![("/wallet_id".into(), "required".into())]
        );
        assert_eq!(
            fields(parse::<Pay>(b"{not json")),
            vec![("/".into(), "malformed_json".into())]
        );
        assert_eq!(
            fields(parse::<Pay>(b"")),
            vec![("/".into(), "required".into())]
        );
        assert_eq!(
            fields(parse::<Pay>(b"[1]")),
            vec![("/".into(), "invalid_type".into())]
        );
    }

    #[test]
    fn a_valid_body_parses() {
        let b = format!(r#"{{"amount_minor": 100, "currency": "EUR", "wallet_id": "{ID}"}}"#);
        assert_eq!(parse::<Pay>(b.as_bytes()).unwrap().value.amount_minor, 100);
    }
}

/// A field documented in the OpenAPI document as `T` but carried as raw JSON, for unions
/// whose unknown variants get their own error code (CREDENTIAL_TYPE_UNSUPPORTED) rather
/// than a parse failure. The handler decides what the value means. Of an object, only the
/// members some variant of `T` declares are kept: the others are ignored as anywhere else
/// in a body (reported to `serde_ignored`, so nothing inside them is checked).
#[derive(Clone, Debug)]
pub struct Documented<T> {
    pub raw: Value,
    _schema: std::marker::PhantomData<T>,
}

impl<'de, T: Type> serde::Deserialize<'de> for Documented<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members<T>(std::marker::PhantomData<T>);
        impl<'de, T: Type> serde::de::Visitor<'de> for Members<T> {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Value, A::Error> {
                let known = declared_members::<T>();
                let mut out = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if known.contains(&key) {
                        out.insert(key, map.next_value()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(Value::Object(out))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
                Ok(Value::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                Ok(v.into())
            }
            fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
                Ok(v.into())
            }
            fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
                Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
            }
            fn visit_str<E>(self, v: &str) -> Result<Value, E> {
                Ok(Value::String(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Value, E> {
                Ok(Value::String(v))
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_none<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Value, D2::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Value::Array(out))
            }
        }
        Ok(Documented {
            raw: d.deserialize_any(Members::<T>(std::marker::PhantomData))?,
            _schema: std::marker::PhantomData,
        })
    }
}

/// Member names, shared.
type Members = std::sync::Arc<std::collections::BTreeSet<String>>;

/// Every member name a variant of `T` declares (and its discriminator), read off the schema
/// `T` publishes; computed once per type.
fn declared_members<T: Type>() -> Members {
    use poem_openapi::registry::MetaSchema;
    use std::{
        collections::{BTreeSet, HashMap},
        sync::{Arc, Mutex, OnceLock},
    };
    fn collect(reg: &Registry, r: &MetaSchemaRef, out: &mut BTreeSet<String>) {
        let schema: &MetaSchema = match r {
            MetaSchemaRef::Reference(name) => match reg.schemas.get(name) {
                Some(s) => s,
                None => return,
            },
            MetaSchemaRef::Inline(s) => s,
        };
        out.extend(schema.properties.iter().map(|(n, _)| n.to_string()));
        if let Some(d) = &schema.discriminator {
            out.insert(d.property_name.to_string());
        }
        for r in schema
            .one_of
            .iter()
            .chain(&schema.any_of)
            .chain(&schema.all_of)
        {
            collect(reg, r, out);
        }
    }
    static CACHE: OnceLock<Mutex<HashMap<&'static str, Members>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    cache
        .entry(std::any::type_name::<T>())
        .or_insert_with(|| {
            let mut reg = Registry::new();
            T::register(&mut reg);
            let mut out = BTreeSet::new();
            collect(&reg, &T::schema_ref(), &mut out);
            Arc::new(out)
        })
        .clone()
}

impl<T> Default for Documented<T> {
    fn default() -> Self {
        Documented {
            raw: Value::Null,
            _schema: std::marker::PhantomData,
        }
    }
}

impl<T: Type> Type for Documented<T> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> std::borrow::Cow<'static, str> {
        T::name()
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl<T: Type> poem_openapi::types::ParseFromJSON for Documented<T> {
    fn parse_from_json(value: Option<Value>) -> poem_openapi::types::ParseResult<Self> {
        Ok(Documented {
            raw: value.unwrap_or_default(),
            _schema: std::marker::PhantomData,
        })
    }
}

impl<T: Type> poem_openapi::types::ToJSON for Documented<T> {
    fn to_json(&self) -> Option<Value> {
        Some(self.raw.clone())
    }
}
