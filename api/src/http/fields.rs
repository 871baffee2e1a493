//! Field types that publish their own limits: the schema a client generator (or schemathesis)
//! reads and the check the server runs come from one place. A `Field<K>` carries the text
//! the client sent; `K` says what it must be (a UUID, an RFC 3339 time, free text of some
//! length) both as JSON Schema and as the check behind `Field::check`, which reports a
//! VALIDATION_ERROR naming the field alongside the operation's other checks. Unit tests
//! hold each kind's published pattern to its check.
use std::{borrow::Cow, marker::PhantomData, ops::Deref};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef},
    types::{ParseFromJSON, ParseFromParameter, ParseResult, ToJSON, Type},
};
use serde_json::Value;

use crate::domain::validate::{self, Errors};

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

/// Bodies are parsed by serde (`http::body`); this is for poem-openapi's derive only.
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

/// A UUID, hyphenated (`validate::uuid`, published as `validate::UUID_PATTERN`).
pub struct UuidKind;

impl Kind for UuidKind {
    fn name() -> Cow<'static, str> {
        "string_uuid".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(validate::UUID_PATTERN.to_string()),
            min_length: Some(36),
            max_length: Some(36),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::uuid(errs, field, value).is_some()
    }
}

pub type UuidText = Field<UuidKind>;

/// An RFC 3339 date-time with an offset (`validate::rfc3339`, published as
/// `format: date-time`).
pub struct DateTimeKind;

impl Kind for DateTimeKind {
    fn name() -> Cow<'static, str> {
        "string_date_time".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(validate::DATE_TIME_PATTERN.to_string()),
            ..MetaSchema::new_with_format("string", "date-time")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::rfc3339(errs, field, value).is_some()
    }
}

pub type DateTimeText = Field<DateTimeKind>;

/// Free text of `MIN` to `MAX` characters (not bytes) without control characters
/// (`validate::length` and `validate::no_control_chars`, published as lengths and
/// `validate::NO_CONTROL_CHARS_PATTERN`).
pub struct TextKind<const MIN: usize, const MAX: usize>;

impl<const MIN: usize, const MAX: usize> Kind for TextKind<MIN, MAX> {
    fn name() -> Cow<'static, str> {
        format!("string_text_{MIN}_{MAX}").into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(validate::NO_CONTROL_CHARS_PATTERN.to_string()),
            min_length: (MIN > 0).then_some(MIN),
            max_length: Some(MAX),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::length(errs, field, value, MIN, MAX)
            && validate::no_control_chars(errs, field, value)
    }
}

pub type Text<const MIN: usize, const MAX: usize> = Field<TextKind<MIN, MAX>>;

/// A closed set of values (`OneOf<S>` publishes them as an `enum`, `validate::one_of`
/// checks them).
pub trait Set: Send + Sync + 'static {
    const NAME: &'static str;
    fn values() -> &'static [&'static str];
}

/// Declares a `Set` over a list of values the domain already holds.
macro_rules! closed_set {
    ($(#[$doc:meta])* $name:ident = $values:expr) => {
        $(#[$doc])*
        pub struct $name;
        impl $crate::http::fields::Set for $name {
            const NAME: &'static str = stringify!($name);
            fn values() -> &'static [&'static str] {
                $values
            }
        }
    };
}

pub struct OneOf<S>(PhantomData<S>);

impl<S: Set> Kind for OneOf<S> {
    fn name() -> Cow<'static, str> {
        format!("string_one_of_{}", S::NAME).into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            enum_items: S::values().iter().map(|v| (*v).into()).collect(),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::one_of(errs, field, value, S::values())
    }
}

closed_set!(
    /// A grant's state.
    GrantStates = crate::domain::grants::STATES
);
closed_set!(
    /// Where a grant came from.
    GrantSources = crate::domain::wallets::GRANT_SOURCES
);
closed_set!(
    /// An offer's state.
    OfferStates = crate::domain::offers::STATES
);
closed_set!(
    /// A settlement's state as the provider reports it.
    SettlementStates = crate::domain::settlements::STATES
);
closed_set!(
    /// A transaction's status in the partner report.
    TransactionStatuses = crate::domain::transactions::STATUSES
);
closed_set!(
    /// The kinds of money movement the partner report lists.
    TransactionKinds = crate::domain::transactions::KINDS
);
closed_set!(
    /// The event types of the webhook catalog.
    EventTypes = crate::domain::webhooks::EVENT_TYPES
);
closed_set!(
    /// A webhook delivery's outcome.
    DeliveryStates = crate::domain::webhooks::DELIVERY_STATES
);
closed_set!(
    /// How a dispute ended.
    DisputeOutcomes = crate::domain::disputes::OUTCOMES
);
closed_set!(
    /// The identity credential types an integration may enable.
    IdentityCredentialTypes = crate::domain::identity::IDENTITY_CREDENTIAL_TYPES
);
closed_set!(
    /// Which way an operator's adjustment moves money.
    AdjustmentDirections = crate::domain::wallets::ADJUSTMENT_DIRECTIONS
);
closed_set!(
    /// The states an operator may give a new grant.
    NewGrantStates = crate::domain::wallets::OPERATOR_GRANT_STATES
);

/// A phone number as a cashier or customer may type it: E.164 once the separators
/// `validate::normalize_phone` strips are gone, a leading `00` standing for `+`
/// (`phone`, published as `validate::PHONE_PATTERN`).
pub struct PhoneKind;

impl Kind for PhoneKind {
    fn name() -> Cow<'static, str> {
        "string_phone".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(validate::PHONE_PATTERN.to_string()),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        phone(errs, field, value).is_some()
    }
}

pub type Phone = Field<PhoneKind>;

/// A phone field normalised to E.164 (required when called).
pub fn phone(e: &mut Errors, field: &str, raw: &str) -> Option<String> {
    if raw.is_empty() {
        e.push(field, "required", "is required (E.164)");
        return None;
    }
    let n = validate::normalize_phone(raw);
    if n.is_none() {
        e.push(
            field,
            "invalid_phone",
            "must be an E.164 phone number, e.g. +4915112345678",
        );
    }
    n
}

/// An amount a request carries, in minor units: a JSON integer from 1 to
/// `MAX_AMOUNT_MINOR` (`validate::amount_minor`, published as `minimum` and `maximum`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct AmountMinor(pub i64);

impl AmountMinor {
    pub fn check(&self, errs: &mut Errors, field: &str) -> bool {
        validate::amount_minor(errs, field, self.0)
    }
}

impl Deref for AmountMinor {
    type Target = i64;
    fn deref(&self) -> &i64 {
        &self.0
    }
}

impl Type for AmountMinor {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "integer_amount_minor".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema {
            minimum: Some(1.0),
            maximum: Some(validate::MAX_AMOUNT_MINOR as f64),
            ..MetaSchema::new_with_format("integer", "int64")
        }))
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl ParseFromJSON for AmountMinor {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        value
            .as_ref()
            .and_then(Value::as_i64)
            .map(AmountMinor)
            .ok_or_else(|| poem_openapi::types::ParseError::custom("must be an integer"))
    }
}

impl ToJSON for AmountMinor {
    fn to_json(&self) -> Option<Value> {
        Some(self.0.into())
    }
}

/// The `limit` of a paginated read: `PAGE_LIMIT_DEFAULT` when absent, else
/// `PAGE_LIMIT_MIN` to `PAGE_LIMIT_MAX` (VALIDATION_ERROR on `query:limit` otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageLimit(pub u64);

pub const PAGE_LIMIT_MIN: u64 = 1;
pub const PAGE_LIMIT_MAX: u64 = 200;
pub const PAGE_LIMIT_DEFAULT: u64 = 50;

impl PageLimit {
    /// The limit to use, checked.
    pub fn resolve(limit: Option<PageLimit>, e: &mut Errors) -> u64 {
        let limit = limit.map_or(PAGE_LIMIT_DEFAULT, |l| l.0);
        if !(PAGE_LIMIT_MIN..=PAGE_LIMIT_MAX).contains(&limit) {
            e.push(
                "query:limit",
                "out_of_range",
                format!("must be between {PAGE_LIMIT_MIN} and {PAGE_LIMIT_MAX}"),
            );
        }
        limit
    }
}

impl Type for PageLimit {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "integer_page_limit".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema {
            minimum: Some(PAGE_LIMIT_MIN as f64),
            maximum: Some(PAGE_LIMIT_MAX as f64),
            default: Some(PAGE_LIMIT_DEFAULT.into()),
            ..MetaSchema::new("integer")
        }))
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl ParseFromParameter for PageLimit {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        value
            .parse()
            .map(PageLimit)
            .map_err(|_| poem_openapi::types::ParseError::custom("must be an integer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published pattern and lengths of `K` accept exactly what its check accepts.
    fn published_agrees_with_check<K: Kind>(values: &[&str]) {
        let schema = K::schema();
        let re = schema
            .pattern
            .as_deref()
            .map(|p| regex::Regex::new(p).unwrap());
        for v in values {
            let n = v.chars().count();
            let published = re.as_ref().is_none_or(|re| re.is_match(v))
                && schema.min_length.is_none_or(|m| n >= m)
                && schema.max_length.is_none_or(|m| n <= m);
            let mut e = Errors::default();
            assert_eq!(published, K::check(&mut e, "f", v), "{}: {v:?}", K::name());
        }
    }

    #[test]
    fn the_published_uuid_accepts_exactly_what_the_server_accepts() {
        published_agrees_with_check::<UuidKind>(&[
            "0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9d",
            "0192B8C4-7E5F-7A1B-9C3D-4E5F6A7B8C9D",
            "0192b8c47e5f7a1b9c3d4e5f6a7b8c9d",
            "{0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9d}",
            "0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9\n",
            "",
        ]);
    }

    #[test]
    fn published_text_limits_accept_exactly_what_the_server_accepts() {
        let long = "é".repeat(5);
        let longer = "é".repeat(6);
        published_agrees_with_check::<TextKind<1, 5>>(&[
            "", "a", "order", "orders", &long, &longer, "a\tb", "a\u{0}", "a\u{7f}", "a\u{85}",
            "a\u{9f}", "a\u{a0}", "日本",
        ]);
        published_agrees_with_check::<TextKind<0, 3>>(&["", "abc", "abcd", "\n"]);
    }

    #[test]
    fn every_control_character_is_refused_by_both() {
        let re = regex::Regex::new(validate::NO_CONTROL_CHARS_PATTERN).unwrap();
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let s = format!("x{c}y");
            let mut e = Errors::default();
            assert_eq!(
                re.is_match(&s),
                validate::no_control_chars(&mut e, "f", &s),
                "U+{:04X}",
                c as u32
            );
        }
    }

    #[test]
    fn the_published_phone_pattern_accepts_exactly_what_the_server_normalises() {
        published_agrees_with_check::<PhoneKind>(&[
            "+4915112345678",
            "+49 151 1234-5678",
            "0049 (151) 12345678",
            "0 0 49151 12345678",
            "+49.151.12345678",
            "+49\u{a0}15112345678",
            "015112345678",
            "+0151",
            "+1234567",
            "+12345678",
            "+123456789012345",
            "+1234567890123456",
            "++4915112345678",
            "+49151+12345678",
            "00015112345678",
            "",
            "+49/151/12345678",
        ]);
    }

    proptest::proptest! {
        #[test]
        fn any_typed_phone_is_published_and_checked_alike(s in "[+0-9 ().-]{0,20}") {
            published_agrees_with_check::<PhoneKind>(&[&s]);
        }
    }

    #[test]
    fn the_published_date_time_accepts_what_the_server_accepts() {
        published_agrees_with_check::<DateTimeKind>(&[
            "2026-06-01T12:00:00Z",
            "2026-06-01t12:00:00z",
            "2026-06-01 12:00:00Z",
            "2026-06-01T12:00:00.123456+02:00",
            "0078-03-28T21:29:34.2-22:53",
            "2026-12-31T23:59:60Z",
            "2026-06-01T12:00:00",
            "2026-06-01",
            "2026-13-01T12:00:00Z",
            "2026-06-01T24:00:00Z",
            "2026-06-01T12:00:00+24:00",
            "",
        ]);
    }

    #[test]
    fn page_limits_outside_the_published_range_are_refused() {
        for (limit, ok) in [
            (None, true),
            (Some(1), true),
            (Some(200), true),
            (Some(0), false),
            (Some(201), false),
        ] {
            let mut e = Errors::default();
            PageLimit::resolve(limit.map(PageLimit), &mut e);
            assert_eq!(e.is_empty(), ok, "{limit:?}");
        }
    }
}
