//! Validators for the contract's primitives. Each takes the field path it reports under
//! and pushes a `FieldError` instead of failing fast, so one response names every bad field.
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::FieldError;

pub use crate::domain::ledger::money::MAX_AMOUNT_MINOR;

/// Collects field errors while a request is checked.
#[derive(Default, Debug)]
pub struct Errors(pub Vec<FieldError>);

impl Errors {
    pub fn push(&mut self, field: impl Into<String>, issue: &str, message: impl Into<String>) {
        self.0.push(FieldError::new(field, issue, message));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Err(VALIDATION_ERROR)` naming every collected field, or `Ok(())`.
    pub fn finish(self) -> Result<(), crate::error::ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(crate::error::ApiError::validation(self.0))
        }
    }
}

/// What `uuid` accepts, as a JSON Schema pattern (published for the Idempotency-Key header);
/// a unit test holds the two to the same answers.
pub const UUID_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

pub fn uuid(errs: &mut Errors, field: &str, value: &str) -> Option<Uuid> {
    // Only the canonical hyphenated form: the contract's ids are printed that way.
    if value.len() == 36
        && let Ok(u) = Uuid::parse_str(value)
    {
        return Some(u);
    }
    errs.push(
        field,
        "invalid_uuid",
        "must be a UUID (8-4-4-4-12 hex digits)",
    );
    None
}

/// The shape `rfc3339` accepts, as a JSON Schema pattern (`format: date-time` alone only
/// annotates). Calendar facts such as February 30 are beyond a pattern: those `rfc3339`
/// still refuses. The date and time are joined by `T` (or `t`), as RFC 3339's grammar and
/// JSON Schema's `date-time` have it; the space its prose allows is refused. A leap second
/// (`:60`) is refused too: JSON Schema admits it only at 23:59 UTC, which depends on the
/// offset and is beyond a pattern, and no time this service stores or compares has one.
pub const DATE_TIME_PATTERN: &str = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";

pub fn rfc3339(errs: &mut Errors, field: &str, value: &str) -> Option<DateTime<Utc>> {
    let joined_by_t = matches!(value.as_bytes().get(10), Some(b'T' | b't'));
    let leap_second = value.get(17..19) == Some("60");
    match DateTime::parse_from_rfc3339(value) {
        Ok(t) if joined_by_t && !leap_second => Some(t.with_timezone(&Utc)),
        _ => {
            errs.push(
                field,
                "invalid_datetime",
                "must be an RFC 3339 date-time with an offset, e.g. 2026-06-01T12:00:00Z",
            );
            None
        }
    }
}

/// A language tag: 2 to 16 characters, subtags of 1 to 8 letters or digits joined by `-`
/// or `_`.
pub const LANGUAGE_TAG_PATTERN: &str = "^[A-Za-z0-9]{1,8}([-_][A-Za-z0-9]{1,8})*$";

pub fn language_tag(errs: &mut Errors, field: &str, value: &str) -> bool {
    let ok = (2..=16).contains(&value.len())
        && value
            .split(['-', '_'])
            .all(|p| !p.is_empty() && p.len() <= 8 && p.bytes().all(|b| b.is_ascii_alphanumeric()));
    if !ok {
        errs.push(
            field,
            "invalid_format",
            "must be a language tag such as en, de or pt-BR",
        );
    }
    ok
}

/// A short code: 5 ASCII letters or digits (`invalid_format`).
pub fn short_code(errs: &mut Errors, field: &str, value: &str) -> bool {
    let ok = value.len() == 5 && value.bytes().all(|b| b.is_ascii_alphanumeric());
    if !ok {
        errs.push(field, "invalid_format", "must be 5 letters or digits");
    }
    ok
}

/// The shape of a QR payload this service mints (no control characters, as no request
/// string has them).
pub const QR_PAYLOAD_PATTERN: &str = "^wq1[.][^\\u0000-\\u001F\\u007F-\\u009F]*$";

/// `wq1.` and at most 200 characters in all (`invalid_format`).
pub fn qr_payload(errs: &mut Errors, field: &str, value: &str) -> bool {
    let ok = value.chars().count() <= 200
        && value.starts_with("wq1.")
        && !value.chars().any(char::is_control);
    if !ok {
        errs.push(
            field,
            "invalid_format",
            "is not a QR payload minted by this service",
        );
    }
    ok
}

/// `value` must be `min` to `max` printable ASCII characters, no spaces (`invalid_format`).
pub fn printable_ascii(
    errs: &mut Errors,
    field: &str,
    value: &str,
    min: usize,
    max: usize,
) -> bool {
    let ok = (min..=max).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_graphic());
    if !ok {
        errs.push(
            field,
            "invalid_format",
            format!("must be {min} to {max} printable ASCII characters without spaces"),
        );
    }
    ok
}

/// `value` must be exactly `n` ASCII digits (`invalid_format`).
pub fn digits(errs: &mut Errors, field: &str, value: &str, n: usize) -> bool {
    let ok = value.len() == n && value.bytes().all(|b| b.is_ascii_digit());
    if !ok {
        errs.push(
            field,
            "invalid_format",
            format!("must be exactly {n} ASCII digits"),
        );
    }
    ok
}

/// `value` must be one of `allowed` (`invalid_value`, naming them all).
pub fn one_of(errs: &mut Errors, field: impl Into<String>, value: &str, allowed: &[&str]) -> bool {
    if allowed.contains(&value) {
        return true;
    }
    errs.push(
        field,
        "invalid_value",
        format!("must be one of {}", allowed.join(", ")),
    );
    false
}

/// What `currency` accepts, as JSON Schema publishes it.
pub const CURRENCY_PATTERN: &str = "^[A-Z]{3}$";

/// ISO-4217 shape: exactly three upper-case ASCII letters. Whether a program supports the
/// currency is a separate check (CURRENCY_NOT_SUPPORTED).
pub fn currency(errs: &mut Errors, field: &str, value: &str) -> bool {
    let ok = value.len() == 3 && value.bytes().all(|b| b.is_ascii_uppercase());
    if !ok {
        errs.push(
            field,
            "invalid_currency",
            "must be an ISO-4217 code of exactly 3 upper-case letters",
        );
    }
    ok
}

/// Strict E.164: `+`, a non-zero leading digit, 8 to 15 digits in all.
pub fn e164(errs: &mut Errors, field: &str, value: &str) -> bool {
    if is_e164(value) {
        true
    } else {
        errs.push(
            field,
            "invalid_phone",
            "must be an E.164 phone number such as +4915112345678",
        );
        false
    }
}

pub fn is_e164(value: &str) -> bool {
    let Some(digits) = value.strip_prefix('+') else {
        return false;
    };
    (8..=15).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !digits.starts_with('0')
}

/// What `normalize_phone` accepts, as a JSON Schema pattern (a unit test in `http::pipeline::fields`
/// holds the two to the same answers): separators anywhere, then `+` or `00`, a non-zero
/// digit and 7 to 14 more digits.
pub const PHONE_PATTERN: &str = "^[ .()\\u00A0-]*(\\+|0[ .()\\u00A0-]*0)[ .()\\u00A0-]*[1-9]([ .()\\u00A0-]*[0-9]){7,14}[ .()\\u00A0-]*$";

/// Turns what a cashier or customer typed into E.164: strips spaces, dashes, dots and
/// parentheses, and turns a leading `00` into `+`. Anything else must already be E.164.
pub fn normalize_phone(input: &str) -> Option<String> {
    let cleaned: String = input
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '.' | '(' | ')' | '\u{a0}'))
        .collect();
    let candidate = if let Some(rest) = cleaned.strip_prefix("00") {
        format!("+{rest}")
    } else {
        cleaned
    };
    is_e164(&candidate).then_some(candidate)
}

/// Length in characters (not bytes), between `min` and `max`.
pub fn length(errs: &mut Errors, field: &str, value: &str, min: usize, max: usize) -> bool {
    let n = value.chars().count();
    if n < min {
        errs.push(
            field,
            if min == 1 { "required" } else { "too_short" },
            format!("must be at least {min} characters"),
        );
        false
    } else if n > max {
        errs.push(
            field,
            "too_long",
            format!("must be at most {max} characters"),
        );
        false
    } else {
        true
    }
}

/// What `no_control_chars` accepts, as a JSON Schema pattern: no character of Unicode's
/// `Cc` category (what `char::is_control` means).
pub const NO_CONTROL_CHARS_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

pub fn no_control_chars(errs: &mut Errors, field: &str, value: &str) -> bool {
    if value.chars().any(char::is_control) {
        errs.push(
            field,
            "control_characters",
            "must not contain control characters",
        );
        false
    } else {
        true
    }
}

/// A `*_minor` amount: the JSON type check (integers only) happens at parse time; this is
/// the range rule.
pub fn min_amount(errs: &mut Errors, field: &str, value: i64, min: i64) -> bool {
    if value < min {
        errs.push(field, "too_small", format!("must be at least {min}"));
        false
    } else {
        true
    }
}

/// An amount a request carries: 1 to `MAX_AMOUNT_MINOR` minor units.
pub fn amount_minor(errs: &mut Errors, field: &str, value: i64) -> bool {
    if !min_amount(errs, field, value, 1) {
        return false;
    }
    if value > MAX_AMOUNT_MINOR {
        errs.push(
            field,
            "too_large",
            format!("must be at most {MAX_AMOUNT_MINOR}"),
        );
        return false;
    }
    true
}

pub fn future(errs: &mut Errors, field: &str, at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    if at <= now {
        errs.push(field, "not_in_future", "must be in the future");
        false
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_published_uuid_pattern_accepts_exactly_what_uuid_accepts() {
        let re = regex::Regex::new(super::UUID_PATTERN).unwrap();
        for v in [
            "0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9d",
            "0192B8C4-7E5F-7A1B-9C3D-4E5F6A7B8C9D",
            "00000000-0000-0000-0000-000000000000",
            "0192b8c47e5f7a1b9c3d4e5f6a7b8c9d",
            "{0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9d}",
            "urn:uuid:0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9d",
            "0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9",
            "0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9dd",
            "0192b8c4_7e5f_7a1b_9c3d_4e5f6a7b8c9d",
            "g192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9d",
            "0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9\n",
            "",
        ] {
            let mut e = Errors::default();
            assert_eq!(re.is_match(v), uuid(&mut e, "f", v).is_some(), "{v:?}");
        }
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_of_names_every_allowed_value() {
        let mut e = Errors::default();
        assert!(one_of(&mut e, "/state", "SETTLED", &["PENDING", "SETTLED"]));
        assert!(e.is_empty());
        assert!(!one_of(
            &mut e,
            "/state",
            "settled",
            &["PENDING", "SETTLED"]
        ));
        assert_eq!(e.0[0].issue, "invalid_value");
        assert_eq!(e.0[0].message, "must be one of PENDING, SETTLED");
    }

    #[test]
    fn currency_is_exactly_three_upper_case_letters() {
        for ok in ["EUR", "USD", "GBP"] {
            let mut e = Errors::default();
            assert!(currency(&mut e, "/currency", ok));
        }
        for bad in ["EURO", "eur", "EU", "E1R", ""] {
            let mut e = Errors::default();
            assert!(!currency(&mut e, "/currency", bad), "{bad}");
            assert_eq!(e.0[0].issue, "invalid_currency");
        }
    }

    #[test]
    fn uuid_accepts_only_the_hyphenated_form() {
        let mut e = Errors::default();
        assert!(uuid(&mut e, "/id", "0191c1c0-7f3e-7a44-b1a6-1f2d3c4b5a69").is_some());
        for bad in [
            "not-a-uuid",
            "0191c1c07f3e7a44b1a61f2d3c4b5a69",
            "",
            "{0191c1c0-7f3e-7a44-b1a6-1f2d3c4b5a69}",
        ] {
            let mut e = Errors::default();
            assert!(uuid(&mut e, "/id", bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn phones_normalise_to_e164() {
        assert_eq!(
            normalize_phone("+49 151 1234-5678").as_deref(),
            Some("+4915112345678")
        );
        assert_eq!(
            normalize_phone("0049 (151) 12345678").as_deref(),
            Some("+4915112345678")
        );
        assert_eq!(normalize_phone("015112345678"), None);
        assert_eq!(normalize_phone("+0151"), None);
        assert_eq!(normalize_phone("+1234567890123456"), None);
    }

    #[test]
    fn lengths_count_characters_not_bytes() {
        let mut e = Errors::default();
        assert!(length(&mut e, "/label", &"é".repeat(120), 1, 120));
        assert!(!length(&mut e, "/label", &"é".repeat(121), 1, 120));
        assert_eq!(e.0[0].issue, "too_long");
    }

    #[test]
    fn rfc3339_needs_an_offset() {
        let mut e = Errors::default();
        assert!(rfc3339(&mut e, "/t", "2026-06-01T12:00:00Z").is_some());
        assert!(rfc3339(&mut e, "/t", "2026-06-01T12:00:00+02:00").is_some());
        assert!(rfc3339(&mut e, "/t", "2026-06-01 12:00:00").is_none());
        assert!(rfc3339(&mut e, "/t", "2026-06-01").is_none());
    }

    proptest! {
        #[test]
        fn normalised_phones_are_always_valid_e164(s in "[+0-9 ()-]{0,24}") {
            if let Some(p) = normalize_phone(&s) {
                prop_assert!(is_e164(&p));
            }
        }
    }
}
