//! Kinds of text: UUIDs, RFC 3339 times, free text, phone numbers.
use std::borrow::Cow;

use poem_openapi::registry::MetaSchema;

use super::{Field, Kind};
use crate::domain::validate::{self, Errors};

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

/// An ISO-4217 currency code: three upper-case letters (`validate::currency`, published as
/// `validate::CURRENCY_PATTERN`). Whether a program supports it is checked apart
/// (CURRENCY_NOT_SUPPORTED).
pub struct CurrencyKind;

impl Kind for CurrencyKind {
    fn name() -> Cow<'static, str> {
        "string_currency".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(validate::CURRENCY_PATTERN.to_string()),
            min_length: Some(3),
            max_length: Some(3),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::currency(errs, field, value)
    }
}

pub type CurrencyCode = Field<CurrencyKind>;

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
