use super::*;
use crate::domain::validate::{self, Errors};

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
fn the_published_currency_accepts_exactly_what_the_server_accepts() {
    published_agrees_with_check::<CurrencyKind>(&[
        "EUR", "eur", "EU", "EURO", "E1R", "ÉUR", "EUR\n", "", "USD",
    ]);
}

#[test]
fn the_published_cursor_alphabet_is_what_the_server_reads() {
    let made = crate::http::pipeline::cursor::encode("offer", uuid::Uuid::now_v7());
    published_agrees_with_check::<CursorKind>(&[
        &made, "", "a b", "abc=", "ab/c", "x\u{0}", "_-09azAZ",
    ]);
}

#[test]
fn an_optional_context_member_is_published_and_checked_as_its_kind_or_empty() {
    published_agrees_with_check::<EmptyOr<UuidKind>>(&[
        "",
        "0192b8c4-7e5f-7a1b-9c3d-4e5f6a7b8c9d",
        "0192b8c4",
        " ",
    ]);
    published_agrees_with_check::<EmptyOr<TextKind<1, 4>>>(&["", "a", "abcd", "abcde", "a\u{7}"]);
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
    published_agrees_with_check::<DateKind>(&[
        "2026-11-29",
        "2024-02-29",
        "2026-12-31",
        "2026-13-01",
        "2026-00-10",
        "2026-01-32",
        "26-11-29",
        "2026-11-29T00:00:00Z",
        "",
    ]);
    published_agrees_with_check::<DateTimeKind>(&[
        "2026-06-01T12:00:00Z",
        "2026-06-01t12:00:00z",
        "2026-06-01 12:00:00Z",
        "2026-06-01T12:00:00.123456+02:00",
        "0078-03-28T21:29:34.2-22:53",
        "2026-12-31T23:59:60Z",
        "2026-06-01T22:05:60Z",
        "2026-06-01T22:05:60.5+01:00",
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

#[test]
fn the_published_origin_accepts_what_the_server_accepts() {
    published_agrees_with_check::<OriginKind>(&[
        "https://wallet.example.com",
        "HTTPS://Wallet.Example.COM:8443",
        "http://localhost:5173",
        "http://LOCALHOST",
        "http://127.0.0.1:3000",
        "http://[::1]:3000",
        "https://[::1]",
        "https://a-b.c-d.e",
        "http://example.com",
        "https://example.com:0",
        "https://example.com:080",
        "https://example.com:+80",
        "https://example.com:65535",
        "https://example.com:65536",
        "https://example.com/",
        "https://*.example.com",
        "https://user@example.com",
        " https://example.com",
        "https://exa mple.com",
        "https://a..b",
        "https://",
        "ftp://example.com",
        "null",
        "",
    ]);
}

#[test]
fn the_published_webhook_url_accepts_what_the_server_accepts() {
    published_agrees_with_check::<WebhookUrlKind>(&[
        "https://hooks.example.com/wallet",
        "HTTPS://Hooks.Example.com:8443/a?b=c#d",
        "http://127.0.0.1:9000/hook",
        "https://[::1]/x",
        "https://user:pw@example.com/",
        "https://example.com/a b",
        "https://exa mple.com",
        "https://example.com/\u{85}",
        "https://example.com\\@evil",
        "https:///path",
        "https://?q",
        "ftp://example.com/x",
        "example.com/path",
        "http://a",
        "https:/example.com",
        "",
    ]);
}

proptest::proptest! {
    #[test]
    fn any_webhook_url_is_published_and_checked_alike(s in "(https?|HTTP|ftp)://[a-zA-Z0-9.:\\[\\]/@?#\\\\ %-]{0,30}") {
        published_agrees_with_check::<WebhookUrlKind>(&[&s]);
    }

    #[test]
    fn any_origin_is_published_and_checked_alike(s in "(https?|HTTP|ftp)://[a-zA-Z0-9.:\\[\\]/@*-]{0,30}") {
        published_agrees_with_check::<OriginKind>(&[&s]);
    }
}

#[test]
fn the_published_codes_and_tags_accept_what_the_server_accepts() {
    published_agrees_with_check::<LanguageKind>(&[
        "en",
        "pt-BR",
        "zh_Hant_TW",
        "e",
        "en-",
        "-en",
        "en--us",
        "abcdefghi",
        "x-abcdefgh-ab",
        "en us",
        "",
    ]);
    published_agrees_with_check::<DigitsKind<6>>(&[
        "123456",
        "12345",
        "1234567",
        "12345a",
        "١٢٣٤٥٦",
    ]);
    published_agrees_with_check::<AsciiKind<8, 128>>(&[
        "abcdefgh",
        "abc defg",
        "abcdefg",
        "ab\u{e9}cdefgh",
        &"x".repeat(128),
        &"x".repeat(129),
    ]);
}
