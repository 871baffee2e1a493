//! Field types that publish their own limits: the schema a client generator (or schemathesis)
//! reads and the check the server runs come from one place. A `Field<K>` carries the text
//! the client sent; `K` says what it must be (a UUID, an RFC 3339 time, free text of some
//! length) both as JSON Schema and as the check behind `Field::check`, which reports a
//! VALIDATION_ERROR naming the field alongside the operation's other checks. Unit tests
//! hold each kind's published pattern to its check. The kinds of text live in `text`, the
//! closed sets in `sets`, the integer fields (amounts, page sizes) in `numbers`.
use std::{borrow::Cow, marker::PhantomData, ops::Deref};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef},
    types::{ParseFromJSON, ParseFromParameter, ParseResult, ToJSON, Type},
};
use serde_json::Value;

use crate::domain::validate::Errors;

pub mod alternatives;
mod list;
mod numbers;
mod sets;
#[cfg(test)]
mod tests;
mod text;

pub use list::List;
pub use numbers::{
    AmountMinor, IntIn, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, PAGE_LIMIT_MIN, PageLimit,
};
pub use sets::*;
pub use text::{
    Ascii, AsciiKind, CardFingerprint, ContextId, ContextText, CurrencyCode, CurrencyKind, Cursor,
    CursorKind, DateKind, DateText, DateTimeKind, DateTimeText, DigitsKind, EmptyOr, Language,
    LanguageKind, Origin, OriginKind, Phone, PhoneKind, QrPayload, QrPayloadKind, ShortCode,
    ShortCodeKind, SmsCode, Text, TextKind, UuidKind, UuidText, WebhookUrl, WebhookUrlKind,
    empty_as_none, phone,
};

/// What a `Field` must hold.
pub trait Kind: Send + Sync + 'static {
    /// A name unique to the kind and its parameters (poem-openapi keys types by it).
    fn name() -> Cow<'static, str>;
    /// The JSON Schema the document publishes.
    fn schema() -> MetaSchema;
    /// The same rule as the server checks it; pushes one error naming `field` when broken.
    fn check(errs: &mut Errors, field: &str, value: &str) -> bool;
}

/// Text as the client sent it, published and checked as `K`.
pub struct Field<K> {
    text: String,
    kind: PhantomData<K>,
}

impl<K: Kind> Field<K> {
    pub fn new(text: impl Into<String>) -> Self {
        Field {
            text: text.into(),
            kind: PhantomData,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn into_string(self) -> String {
        self.text
    }

    /// `K`'s rule, reported under `field` (a JSON pointer such as `/reason`, or
    /// `path:id` / `query:cursor`).
    pub fn check(&self, errs: &mut Errors, field: &str) -> bool {
        K::check(errs, field, &self.text)
    }
}

impl<K> Clone for Field<K> {
    fn clone(&self) -> Self {
        Field {
            text: self.text.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> Default for Field<K> {
    fn default() -> Self {
        Field {
            text: String::new(),
            kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Field<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.text.fmt(f)
    }
}

impl<K> PartialEq for Field<K> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl<K> Eq for Field<K> {}

impl<K> Deref for Field<K> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl<K> From<String> for Field<K> {
    fn from(text: String) -> Self {
        Field {
            text,
            kind: PhantomData,
        }
    }
}

impl<K> From<Field<K>> for String {
    fn from(f: Field<K>) -> String {
        f.text
    }
}

impl<K> AsRef<str> for Field<K> {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl<'de, K> serde::Deserialize<'de> for Field<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Field {
            text: String::deserialize(d)?,
            kind: PhantomData,
        })
    }
}

impl<K> serde::Serialize for Field<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(s)
    }
}

impl<K: Kind> Type for Field<K> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        K::name()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(K::schema()))
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

/// Any string is taken as sent: the operation checks it with `check`, so a bad value is a
/// VALIDATION_ERROR reported with the operation's other field errors.
impl<K: Kind> ParseFromParameter for Field<K> {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        Ok(Field::new(value))
    }
}

/// Bodies are parsed by serde (`http::pipeline::body`); this is for poem-openapi's derive only.
impl<K: Kind> ParseFromJSON for Field<K> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value {
            Some(Value::String(s)) => Ok(Field::new(s)),
            _ => Err(poem_openapi::types::ParseError::custom("must be a string")),
        }
    }
}

impl<K: Kind> ToJSON for Field<K> {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.text.clone()))
    }
}
