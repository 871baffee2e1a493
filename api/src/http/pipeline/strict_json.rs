//! The one reading of a request body's JSON, stricter than the JSON grammar in two ways
//! that keep every reader of the body seeing the same request:
//!
//! - **No duplicated member names**, at any depth. `{"amount_minor": 1, "amount_minor":
//!   4321}` is valid JSON whose meaning depends on the reader (serde keeps the last, many
//!   proxies, WAFs and log pipelines the first), so it is refused as `duplicate_member`.
//! - **No control characters** (Unicode category Cc: U+0000–U+001F, U+007F–U+009F) in any
//!   member name or string the operation reads (`control_chars_in`, after the body's type
//!   has read it). No field of the contract carries one; a NUL would reach the database
//!   (PostgreSQL refuses it in text) and logs. Refused as `control_characters`. A member
//!   the operation does not know is never read, stored or echoed: its own name is checked
//!   (its object is read), what it holds is ignored with it. The published schemas say the
//!   same: names and strings are patterned, unknown values free. Which members those are,
//!   the body's type decides as it reads (`body::parse`).
//!
//! Both name the offending member as a JSON pointer, like every other field error.
use std::{cell::RefCell, fmt};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{ApiError, FieldError};

/// Parses `bytes` as one JSON value under the rules above.
pub fn parse(bytes: &[u8]) -> Result<Value, ApiError> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Reader {
        at: &mut String::new(),
        found: &found,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match (parsed, found.into_inner()) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some(field)) => Err(ApiError::validation(vec![field])),
        (Err(e), None) => Err(ApiError::field(
            "/",
            "malformed_json",
            format!("the body is not valid JSON: {e}"),
        )),
    }
}

/// The first member name or string of `json` holding a control character, as the field
/// error, outside the members at `ignored` (JSON pointers of members the operation did not
/// read: their own names are checked, as their object's, but nothing inside them).
pub fn control_chars_in(json: &Value, ignored: &[String]) -> Option<FieldError> {
    fn walk(v: &Value, at: &mut String, ignored: &[String]) -> bool {
        match v {
            Value::String(s) => has_control_chars(s),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let back = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                let found = !ignored.contains(at) && walk(item, at, ignored);
                if !found {
                    at.truncate(back);
                }
                found
            }),
            Value::Object(members) => members.iter().any(|(name, item)| {
                let back = at.len();
                push_pointer_segment(at, name);
                let found =
                    has_control_chars(name) || (!ignored.contains(at) && walk(item, at, ignored));
                if !found {
                    at.truncate(back);
                }
                found
            }),
            _ => false,
        }
    }
    let mut at = String::new();
    walk(json, &mut at, ignored).then(|| control_chars(&at))
}

/// Appends `/segment` to the JSON pointer `at`, escaped (`~0`, `~1`). Every pointer a
/// field error names is built here. A control character becomes U+FFFD: in a member name it
/// is itself the error, never echoed back.
pub fn push_pointer_segment(at: &mut String, segment: &str) {
    at.push('/');
    // Member names are plain ASCII nearly always: appended whole.
    if segment
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_control() && b != b'~' && b != b'/')
    {
        at.push_str(segment);
        return;
    }
    push_escaped(at, segment);
}

/// `segment` escaped a char at a time, as `push_pointer_segment` escapes it.
fn push_escaped(at: &mut String, segment: &str) {
    for c in segment.chars() {
        match c {
            '~' => at.push_str("~0"),
            '/' => at.push_str("~1"),
            c if c.is_control() => at.push('\u{fffd}'),
            c => at.push(c),
        }
    }
}

/// Whether `s` holds a character the contract never accepts in a string.
pub fn has_control_chars(s: &str) -> bool {
    s.chars().any(char::is_control)
}

fn control_chars(at: &str) -> FieldError {
    FieldError::new(
        pointer_or_root(at),
        "control_characters",
        "must not contain control characters",
    )
}

fn pointer_or_root(at: &str) -> String {
    if at.is_empty() { "/".into() } else { at.into() }
}

/// Reads the value at pointer `at`, recording the first rule it breaks in `found`.
struct Reader<'a> {
    at: &'a mut String,
    found: &'a RefCell<Option<FieldError>>,
}

impl Reader<'_> {
    fn refuse<E: de::Error>(&self, e: FieldError) -> E {
        let message = format!("{}: {}", e.field, e.message);
        self.found.borrow_mut().get_or_insert(e);
        E::custom(message)
    }

    fn push(&mut self, segment: &str) -> usize {
        let len = self.at.len();
        push_pointer_segment(self.at, segment);
        len
    }
}

impl<'de> DeserializeSeed<'de> for Reader<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reader<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
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

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        loop {
            let back = self.push(&out.len().to_string());
            let next = seq.next_element_seed(Reader {
                at: &mut *self.at,
                found: self.found,
            })?;
            self.at.truncate(back);
            match next {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let back = self.push(&key);
            if out.contains_key(&key) {
                return Err(self.refuse(FieldError::new(
                    self.at.clone(),
                    "duplicate_member",
                    "appears more than once in its object; send each member once",
                )));
            }
            let value = map.next_value_seed(Reader {
                at: &mut *self.at,
                found: self.found,
            })?;
            self.at.truncate(back);
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn refused(body: &str) -> (String, String) {
        let e = parse(body.as_bytes())
            .expect_err("must be refused")
            .to_body();
        assert_eq!(e["code"], "VALIDATION_ERROR", "{e}");
        let f = &e["details"]["fields"][0];
        (
            f["field"].as_str().unwrap().into(),
            f["issue"].as_str().unwrap().into(),
        )
    }

    #[test]
    fn a_duplicated_member_is_refused_at_any_depth() {
        assert_eq!(
            refused(r#"{"amount_minor": 1, "amount_minor": 4321}"#),
            ("/amount_minor".into(), "duplicate_member".into())
        );
        assert_eq!(
            refused(r#"{"context": {"merchant_id": "a"}, "context": {"merchant_id": "b"}}"#),
            ("/context".into(), "duplicate_member".into())
        );
        assert_eq!(
            refused(r#"{"basket": {"lines": [{"sku": "A"}, {"sku": "B", "sku": "C"}]}}"#),
            ("/basket/lines/1/sku".into(), "duplicate_member".into())
        );
        assert_eq!(
            refused(r#"{"a/b~c": 1, "a/b~c": 2}"#),
            ("/a~1b~0c".into(), "duplicate_member".into())
        );
        // The same name in sibling objects is no duplicate.
        assert!(parse(br#"{"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]}"#).is_ok());
    }

    #[test]
    fn a_control_character_is_refused_in_any_name_and_in_every_string_read() {
        let found = |body: &str, ignored: &[&str]| {
            let json = parse(body.as_bytes()).expect("well-formed JSON");
            let ignored: Vec<String> = ignored.iter().map(|s| s.to_string()).collect();
            control_chars_in(&json, &ignored).map(|f| (f.field, f.issue))
        };
        let cc = |at: &str| Some((at.to_string(), "control_characters".to_string()));
        assert_eq!(
            found(r#"{"basket": {"lines": [{"sku": "A\u0000"}]}}"#, &[]),
            cc("/basket/lines/0/sku")
        );
        assert_eq!(found(r#"{"reason": "two\nlines"}"#, &[]), cc("/reason"));
        assert_eq!(found("{\"c1\": \"\u{85}\"}", &[]), cc("/c1"));
        assert_eq!(found(r#""\u0000""#, &[]), cc("/"));
        assert_eq!(found(r#"{"a/b": ["ok", "\u0001"]}"#, &[]), cc("/a~1b/1"));
        // A member the operation did not read is skipped, with everything under it.
        assert_eq!(
            found(
                r#"{"note": "x\u0000", "pos": {"raw": ["\u0001"]}}"#,
                &["/note", "/pos"]
            ),
            None
        );
        assert_eq!(
            found(r#"{"note": "x\u0000", "reason": "\u0002"}"#, &["/note"]),
            cc("/reason")
        );
        assert_eq!(
            found("{\"name\": \"Caf\u{e9} \u{1F600}\", \"tab\": \"a b\"}", &[]),
            None
        );
    }

    #[test]
    fn malformed_json_and_trailing_bytes_are_malformed() {
        assert_eq!(refused("{not json"), ("/".into(), "malformed_json".into()));
        assert_eq!(
            refused(r#"{"a": 1} {"a": 2}"#),
            ("/".into(), "malformed_json".into())
        );
    }

    proptest! {
        #[test]
        fn a_pointer_segment_is_escaped_char_by_char(segment in "[ -~\u{0}-\u{1f}\u{7f}-\u{a0}\u{e9}]{0,12}") {
            let mut expected = String::from("/x/");
            push_escaped(&mut expected, &segment);
            let mut at = String::from("/x");
            push_pointer_segment(&mut at, &segment);
            prop_assert_eq!(at, expected);
        }

        #[test]
        fn what_it_accepts_is_exactly_what_serde_json_reads(v in arb_json()) {
            let text = serde_json::to_string(&v).unwrap();
            prop_assert_eq!(parse(text.as_bytes()).unwrap(), v);
        }

        #[test]
        fn any_control_character_anywhere_in_a_string_read_is_found(
            prefix in "[a-z]{0,5}", c in 0u32..0xa0, suffix in "[a-z]{0,5}",
        ) {
            let ch = char::from_u32(c).unwrap();
            prop_assume!(ch.is_control());
            let body = serde_json::json!({"outer": [{"field": format!("{prefix}{ch}{suffix}")}]});
            let json = parse(body.to_string().as_bytes()).unwrap();
            let f = control_chars_in(&json, &[]).expect("found");
            prop_assert_eq!(f.field, "/outer/0/field");
            prop_assert_eq!(f.issue, "control_characters");
            prop_assert!(control_chars_in(&json, &["/outer".to_string()]).is_none());
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[ -~\u{e9}\u{4e2d}]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z_/~]{1,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
