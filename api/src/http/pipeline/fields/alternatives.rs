//! Members a body must give one of: which combinations are accepted is written once, as
//! `Alternatives`, and both published (an `anyOf` on the body's schema, one branch per
//! accepted combination) and checked (`Alternatives::check`). A member counts as given when
//! it is present, not null and not `""` (the context's optional members read `""` as none).
use serde_json::{Value, json};

use crate::domain::validate::Errors;

/// One accepted combination: every `given` member given, every `absent` one not.
pub struct Branch {
    pub given: &'static [&'static str],
    pub absent: &'static [&'static str],
}

/// The combinations a body schema accepts. Members are paths below the body
/// (`context/service_session_id`); `field` and `issue` name the error when none matches.
pub struct Alternatives {
    /// The component the rule is published on.
    pub schema: &'static str,
    pub branches: &'static [Branch],
    pub field: &'static str,
    pub issue: &'static str,
    pub message: &'static str,
}

impl Alternatives {
    /// Pushes the rule's error unless some branch matches; `given` says whether a member
    /// (one of the branches' paths) is given.
    pub fn check(&self, errs: &mut Errors, at: &str, given: impl Fn(&str) -> bool) -> bool {
        let ok = self
            .branches
            .iter()
            .any(|b| b.given.iter().all(|m| given(m)) && !b.absent.iter().any(|m| given(m)));
        if !ok {
            errs.push(format!("{at}{}", self.field), self.issue, self.message);
        }
        ok
    }

    /// Every member path the rule names.
    pub fn members(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.branches
            .iter()
            .flat_map(|b| b.given.iter().chain(b.absent.iter()).copied())
    }

    /// The rule as JSON Schema, added to `schema` (an object schema) as one more `allOf`
    /// entry, so several rules on one body compose.
    pub fn publish(&self, schema: &mut Value) {
        let branches: Vec<Value> = self
            .branches
            .iter()
            .map(|b| {
                let mut branch = json!({});
                for m in b.given {
                    merge(&mut branch, &nested(m, true));
                }
                for m in b.absent {
                    merge(&mut branch, &nested(m, false));
                }
                branch
            })
            .collect();
        if let Some(map) = schema.as_object_mut()
            && let Some(all) = map
                .entry("allOf")
                .or_insert_with(|| json!([]))
                .as_array_mut()
        {
            all.push(json!({ "anyOf": branches }));
        }
    }
}

/// `path` given (present, not null, not empty) or absent (missing or null), as a schema.
fn nested(path: &str, given: bool) -> Value {
    let (head, rest) = match path.split_once('/') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    match rest {
        Some(r) if given => json!({"required": [head], "properties": {head: nested(r, true)}}),
        // Absent below an object: the object is absent, or null, or lacks the member.
        Some(r) => json!({"properties": {head: {"anyOf": [{"type": "null"}, nested(r, false)]}}}),
        None if given => json!({
            "required": [head],
            "properties": {head: {"not": {"anyOf": [{"type": "null"}, {"const": ""}]}}},
        }),
        None => json!({"properties": {head: {"anyOf": [{"type": "null"}, {"const": ""}]}}}),
    }
}

/// Merges two branch schemas (`required` lists joined, `properties` merged member by member).
fn merge(into: &mut Value, from: &Value) {
    let into = into.as_object_mut().expect("a branch is an object");
    if let Some(req) = from.get("required").and_then(Value::as_array) {
        let list = into.entry("required").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            for r in req {
                if !list.contains(r) {
                    list.push(r.clone());
                }
            }
        }
    }
    if let Some(props) = from.get("properties").and_then(Value::as_object) {
        let target = into.entry("properties").or_insert_with(|| json!({}));
        for (k, v) in props {
            let merged = match target.get(k) {
                Some(existing) => json!({"allOf": [existing, v]}),
                None => v.clone(),
            };
            target[k] = merged;
        }
    }
}
