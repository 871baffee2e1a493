//! Kinds of text: UUIDs, RFC 3339 times, free text, phone numbers.
use std::borrow::Cow;

use poem_openapi::registry::MetaSchema;

use crate::domain::validate::{self, Errors};
use crate::http::pipeline::fields::{Field, Kind};

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

/// A calendar date, `YYYY-MM-DD` (published as `format: date`), that exists.
pub struct DateKind;

/// What a date looks like; whether it exists is checked apart (2026-02-30 does not).
pub const DATE_PATTERN: &str = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$";

impl Kind for DateKind {
    fn name() -> Cow<'static, str> {
        "string_date".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(DATE_PATTERN.to_string()),
            min_length: Some(10),
            max_length: Some(10),
            ..MetaSchema::new_with_format("string", "date")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        let ok = value.len() == 10 && chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d").is_ok();
        if !ok {
            errs.push(
                field,
                "invalid",
                "must be a date that exists, as YYYY-MM-DD",
            );
        }
        ok
    }
}

pub type DateText = Field<DateKind>;

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

/// `K`, or `""`: the context's optional members, where null, absent and `""` all mean none
/// (published as `K`'s pattern or the empty string, without `K`'s minimum length).
pub struct EmptyOr<K>(std::marker::PhantomData<K>);

impl<K: Kind> Kind for EmptyOr<K> {
    fn name() -> Cow<'static, str> {
        format!("empty_or_{}", K::name()).into()
    }

    fn schema() -> MetaSchema {
        let inner = K::schema();
        MetaSchema {
            pattern: inner.pattern.map(|p| format!("^$|{p}")),
            min_length: None,
            ..inner
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        value.is_empty() || K::check(errs, field, value)
    }
}

/// An optional context id: a UUID, or null, absent or `""` for none.
pub type ContextId = Field<EmptyOr<UuidKind>>;
/// Optional context text of 1 to `MAX` characters, or null, absent or `""` for none.
pub type ContextText<const MAX: usize> = Field<EmptyOr<TextKind<1, MAX>>>;

/// An optional string sent empty reads as absent: till software often sends `""` for a
/// member it has no value for, which means the same as null here. For plain strings and
/// typed fields alike.
pub fn empty_as_none<'de, D: serde::Deserializer<'de>, T: From<String>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    use serde::Deserialize;
    let v = Option::<String>::deserialize(d)?;
    Ok(v.filter(|s| !s.is_empty()).map(T::from))
}

/// A list's `cursor` as a page returned it: base64url without padding (`http::pipeline::cursor`).
/// Published with that alphabet; which list and position it names is only known by
/// decoding it, so a well-formed cursor no page returned is `invalid_cursor`.
pub struct CursorKind;

/// The cursor alphabet, as JSON Schema publishes it.
pub const CURSOR_PATTERN: &str = "^[A-Za-z0-9_-]+$";

impl Kind for CursorKind {
    fn name() -> Cow<'static, str> {
        "string_cursor".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(CURSOR_PATTERN.to_string()),
            min_length: Some(1),
            max_length: Some(512),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        let ok = (1..=512).contains(&value.len())
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            errs.push(
                field,
                "invalid_cursor",
                "is not a cursor this list returned",
            );
        }
        ok
    }
}

pub type Cursor = Field<CursorKind>;

/// `MIN` to `MAX` printable ASCII characters without spaces (`validate::printable_ascii`,
/// published as `^[!-~]{MIN,MAX}$`): fingerprints and tokens other systems issued.
pub struct AsciiKind<const MIN: usize, const MAX: usize>;

impl<const MIN: usize, const MAX: usize> Kind for AsciiKind<MIN, MAX> {
    fn name() -> Cow<'static, str> {
        format!("string_ascii_{MIN}_{MAX}").into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(format!("^[!-~]{{{MIN},{MAX}}}$")),
            min_length: Some(MIN),
            max_length: Some(MAX),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::printable_ascii(errs, field, value, MIN, MAX)
    }
}

pub type Ascii<const MIN: usize, const MAX: usize> = Field<AsciiKind<MIN, MAX>>;
/// A payment card fingerprint as an acquirer gives it.
pub type CardFingerprint = Ascii<8, 128>;

/// Exactly `N` ASCII digits (`validate::digits`, published as `^[0-9]{N}$`): the codes a
/// customer reads out from an SMS.
pub struct DigitsKind<const N: usize>;

impl<const N: usize> Kind for DigitsKind<N> {
    fn name() -> Cow<'static, str> {
        format!("string_digits_{N}").into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(format!("^[0-9]{{{N}}}$")),
            min_length: Some(N),
            max_length: Some(N),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::digits(errs, field, value, N)
    }
}

/// The 6 digits of an SMS code.
pub type SmsCode = Field<DigitsKind<6>>;

/// A language tag such as `en`, `de` or `pt-BR` (`validate::language_tag`, published as
/// `validate::LANGUAGE_TAG_PATTERN` with its lengths).
pub struct LanguageKind;

impl Kind for LanguageKind {
    fn name() -> Cow<'static, str> {
        "string_language".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(validate::LANGUAGE_TAG_PATTERN.to_string()),
            min_length: Some(2),
            max_length: Some(16),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::language_tag(errs, field, value)
    }
}

pub type Language = Field<LanguageKind>;

/// A browser origin an integration allows (`cors::normalize_origin`, published as
/// `cors::ORIGIN_PATTERN` with `cors::MAX_ORIGIN_LEN`).
pub struct OriginKind;

impl Kind for OriginKind {
    fn name() -> Cow<'static, str> {
        "string_origin".into()
    }

    fn schema() -> MetaSchema {
        use crate::domain::platform::cors::{MAX_ORIGIN_LEN, ORIGIN_PATTERN};
        MetaSchema {
            pattern: Some(ORIGIN_PATTERN.to_string()),
            max_length: Some(MAX_ORIGIN_LEN),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        let checked = crate::domain::platform::cors::normalize_origin(value);
        if let Err(why) = checked {
            errs.push(field, "invalid_origin", why);
        }
        checked.is_ok()
    }
}

pub type Origin = Field<OriginKind>;

/// A webhook endpoint's address as a schema can state it: an absolute `http(s)` URL with a
/// host, no credentials and no white space (`webhooks::target::well_formed`, published as
/// `format: uri` with `target::URL_PATTERN`), 8 to 2,048 characters. Whether it may be
/// reached (https outside the sandbox, a host resolving to a public address) is the
/// domain's check when the endpoint is registered.
pub struct WebhookUrlKind;

impl Kind for WebhookUrlKind {
    fn name() -> Cow<'static, str> {
        "string_webhook_url".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(crate::domain::webhooks::target::URL_PATTERN.to_string()),
            min_length: Some(8),
            max_length: Some(2048),
            ..MetaSchema::new_with_format("string", "uri")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        if !validate::length(errs, field, value, 8, 2048) {
            return false;
        }
        let ok = crate::domain::webhooks::target::well_formed(value);
        if !ok {
            errs.push(
                field,
                "invalid_url",
                "must be an absolute http(s) URL with a host, without credentials or spaces",
            );
        }
        ok
    }
}

pub type WebhookUrl = Field<WebhookUrlKind>;

/// The 5 letters or digits of a QR mint's short code, in either case
/// (`validate::short_code`, published as `^[A-Za-z0-9]{5}$`).
pub struct ShortCodeKind;

impl Kind for ShortCodeKind {
    fn name() -> Cow<'static, str> {
        "string_short_code".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some("^[A-Za-z0-9]{5}$".to_string()),
            min_length: Some(5),
            max_length: Some(5),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::short_code(errs, field, value)
    }
}

pub type ShortCode = Field<ShortCodeKind>;

/// A QR payload as `POST /qr/mint` returns it: `wq1.` and up to 196 more characters
/// (`validate::qr_payload`); whether it was minted is known by opening it.
pub struct QrPayloadKind;

impl Kind for QrPayloadKind {
    fn name() -> Cow<'static, str> {
        "string_qr_payload".into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            pattern: Some(validate::QR_PAYLOAD_PATTERN.to_string()),
            min_length: Some(4),
            max_length: Some(200),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::qr_payload(errs, field, value)
    }
}

pub type QrPayload = Field<QrPayloadKind>;
