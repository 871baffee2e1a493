//! Integer fields: request amounts and page sizes.
use std::{borrow::Cow, ops::Deref};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef},
    types::{ParseFromJSON, ParseFromParameter, ParseResult, ToJSON, Type},
};
use serde_json::Value;

use crate::domain::validate::{self, Errors};

/// poem-openapi's `Type` for an integer field whose schema is `$schema`.
macro_rules! integer_type {
    ($t:ty, $name:literal, $schema:expr) => {
        impl Type for $t {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> Cow<'static, str> {
                $name.into()
            }

            fn schema_ref() -> MetaSchemaRef {
                MetaSchemaRef::Inline(Box::new($schema))
            }

            fn as_raw_value(&self) -> Option<&Self> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
                Box::new(self.as_raw_value().into_iter())
            }
        }
    };
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

integer_type!(
    AmountMinor,
    "integer_amount_minor",
    MetaSchema {
        minimum: Some(1.0),
        maximum: Some(validate::MAX_AMOUNT_MINOR as f64),
        ..MetaSchema::new_with_format("integer", "int64")
    }
);

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

integer_type!(
    PageLimit,
    "integer_page_limit",
    MetaSchema {
        minimum: Some(PAGE_LIMIT_MIN as f64),
        maximum: Some(PAGE_LIMIT_MAX as f64),
        default: Some(PAGE_LIMIT_DEFAULT.into()),
        ..MetaSchema::new("integer")
    }
);

impl ParseFromParameter for PageLimit {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        value
            .parse()
            .map(PageLimit)
            .map_err(|_| poem_openapi::types::ParseError::custom("must be an integer"))
    }
}

/// A JSON integer a request carries that the contract bounds to `MIN..=MAX`, published as
/// `minimum` and `maximum`; `check` reports anything else as `out_of_range` (a missing
/// member read as 0 included, where the body defaults it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct IntIn<const MIN: i64, const MAX: i64>(pub i64);

impl<const MIN: i64, const MAX: i64> IntIn<MIN, MAX> {
    pub fn check(&self, errs: &mut Errors, field: &str) -> bool {
        let ok = (MIN..=MAX).contains(&self.0);
        if !ok {
            errs.push(
                field,
                "out_of_range",
                format!("must be between {MIN} and {MAX}"),
            );
        }
        ok
    }
}

impl<const MIN: i64, const MAX: i64> Type for IntIn<MIN, MAX> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        format!("integer_{MIN}_{MAX}").into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema {
            minimum: Some(MIN as f64),
            maximum: Some(MAX as f64),
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

/// A query parameter: any integer is taken, and `check` reports one out of range with the
/// operation's other field errors.
impl<const MIN: i64, const MAX: i64> ParseFromParameter for IntIn<MIN, MAX> {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        value
            .parse()
            .map(IntIn)
            .map_err(|_| poem_openapi::types::ParseError::custom("must be an integer"))
    }
}

impl<const MIN: i64, const MAX: i64> ParseFromJSON for IntIn<MIN, MAX> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        value
            .as_ref()
            .and_then(Value::as_i64)
            .map(IntIn)
            .ok_or_else(|| poem_openapi::types::ParseError::custom("must be an integer"))
    }
}

impl<const MIN: i64, const MAX: i64> ToJSON for IntIn<MIN, MAX> {
    fn to_json(&self) -> Option<Value> {
        Some(self.0.into())
    }
}
