//! RFC 3339 timestamps in the JSON the service keeps for itself (key-cache entries,
//! response copies), for `#[serde(with = "...")]`. They are written exactly as chrono
//! writes them and read with its strict RFC 3339 parser: `DateTime`'s own `Deserialize`
//! goes through chrono's lenient format parser, several times slower, and these are read
//! on every authenticated request. A text the strict parser refuses is still read
//! leniently, so every entry chrono could read before stays readable.
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserializer, Serialize, Serializer, de};

pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    t.serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    d.deserialize_str(Rfc3339)
}

/// The same for an optional timestamp (`null` is `None`).
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        t.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        d.deserialize_option(OptionalRfc3339)
    }

    struct OptionalRfc3339;

    impl<'de> de::Visitor<'de> for OptionalRfc3339 {
        type Value = Option<DateTime<Utc>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an RFC 3339 timestamp or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            super::deserialize(d).map(Some)
        }
    }
}

struct Rfc3339;

impl de::Visitor<'_> for Rfc3339 {
    type Value = DateTime<Utc>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an RFC 3339 timestamp")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        parse(text).map_err(E::custom)
    }
}

fn parse(text: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| text.parse())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde::Deserialize;

    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Entry {
        #[serde(with = "super")]
        at: DateTime<Utc>,
        #[serde(with = "super::option", default)]
        until: Option<DateTime<Utc>>,
    }

    #[test]
    fn reads_what_chrono_writes_and_writes_what_chrono_writes() {
        let at = Utc.timestamp_opt(1_795_000_000, 756_081_029).unwrap();
        for until in [None, Some(at + chrono::Duration::days(1))] {
            let entry = Entry { at, until };
            let text = serde_json::to_string(&entry).unwrap();
            // Byte for byte what chrono's own Serialize gives: entries written by earlier
            // builds and by this one are interchangeable.
            assert_eq!(
                text,
                serde_json::json!({ "at": at, "until": until }).to_string()
            );
            assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), entry);
        }
    }

    #[test]
    fn reads_any_offset_and_what_only_the_lenient_parser_accepts() {
        let e: Entry =
            serde_json::from_str(r#"{"at":"2026-11-24T16:28:53.5+01:00","until":null}"#).unwrap();
        assert_eq!(e.at, Utc.timestamp_opt(1_795_534_133, 500_000_000).unwrap());
        assert_eq!(e.until, None);
        // A space for the `T`: not RFC 3339, but chrono's lenient parser took it.
        let e: Entry = serde_json::from_str(r#"{"at":"2026-11-24 15:28:53Z"}"#).unwrap();
        assert_eq!(e.at, Utc.timestamp_opt(1_795_534_133, 0).unwrap());
        assert!(serde_json::from_str::<Entry>(r#"{"at":"yesterday"}"#).is_err());
    }
}
