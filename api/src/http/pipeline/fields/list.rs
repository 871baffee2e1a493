//! Arrays whose length the contract bounds: published as `minItems` and `maxItems`, checked
//! by `List::check` with the same bounds.
use std::{borrow::Cow, ops::Deref};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef, Registry},
    types::{ParseFromJSON, ParseResult, ToJSON, Type},
};
use serde_json::Value;

use crate::domain::validate::Errors;

/// `MIN` to `MAX` items of `T`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct List<T, const MIN: usize, const MAX: usize>(pub Vec<T>);

impl<T, const MIN: usize, const MAX: usize> Default for List<T, MIN, MAX> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<T, const MIN: usize, const MAX: usize> List<T, MIN, MAX> {
    /// The length rule (`out_of_range`, naming both bounds); the items are the caller's.
    pub fn check(&self, errs: &mut Errors, field: &str) -> bool {
        let ok = (MIN..=MAX).contains(&self.0.len());
        if !ok {
            errs.push(
                field,
                "out_of_range",
                format!("must hold {MIN} to {MAX} items"),
            );
        }
        ok
    }
}

impl<T, const MIN: usize, const MAX: usize> Deref for List<T, MIN, MAX> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T: Type, const MIN: usize, const MAX: usize> Type for List<T, MIN, MAX> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = T::RawValueType;

    fn name() -> Cow<'static, str> {
        format!("list_{}_{MIN}_{MAX}", T::name()).into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema {
            items: Some(Box::new(T::schema_ref())),
            min_items: Some(MIN),
            max_items: Some(MAX),
            ..MetaSchema::new("array")
        }))
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(self.0.iter().filter_map(|v| v.as_raw_value()))
    }
}

/// Bodies are parsed by serde (`http::pipeline::body`); this is for poem-openapi's derive only.
impl<T: ParseFromJSON, const MIN: usize, const MAX: usize> ParseFromJSON for List<T, MIN, MAX> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        Vec::<T>::parse_from_json(value)
            .map(List)
            .map_err(poem_openapi::types::ParseError::propagate)
    }
}

impl<T: ToJSON, const MIN: usize, const MAX: usize> ToJSON for List<T, MIN, MAX> {
    fn to_json(&self) -> Option<Value> {
        self.0.to_json()
    }
}
