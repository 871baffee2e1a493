//! Parameter types that publish their own format: the schema a client generator reads and
//! the check the server runs come from one place.
use std::{borrow::Cow, ops::Deref};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef},
    types::{ParseFromParameter, ParseResult, Type},
};

use crate::domain::validate;

/// A UUID in a path or a query string, as the client sent it. Published as a string with
/// `validate::UUID_PATTERN` (the pattern a unit test holds to `validate::uuid`); checked by
/// the operation with `path_uuid` / `validate::uuid`, so a malformed one is a VALIDATION_ERROR
/// naming the parameter, reported after the operation's own checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UuidText(pub String);

impl Deref for UuidText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for UuidText {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Type for UuidText {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "string_uuid".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema {
            pattern: Some(validate::UUID_PATTERN.to_string()),
            min_length: Some(36),
            max_length: Some(36),
            ..MetaSchema::new("string")
        }))
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl ParseFromParameter for UuidText {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        Ok(UuidText(value.to_string()))
    }
}
