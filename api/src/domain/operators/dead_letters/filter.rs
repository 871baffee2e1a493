//! Reading an operator's dead-letter filter: the same fields from CLI flags, a console form
//! or a query string, every one checked at once, and the filter described back for the
//! audit log.
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::outbox::job_requests::QUEUES;
use crate::{
    error::{ApiError, FieldError},
    store::queues::dead_letters::Filter,
};

/// A dead letter's states: still dead, replayed onto its queue, or purged.
pub const STATUSES: &[&str] = &["dead", "replayed", "purged"];

/// A filter as an operator types it (CLI flags, console form, query string), unchecked.
#[derive(Default, Clone, Debug)]
pub struct FilterInput {
    pub status: Option<String>,
    pub queue: Option<String>,
    pub job_type: Option<String>,
    /// An integration (platform tenant) id.
    pub tenant: Option<String>,
    pub merchant: Option<String>,
    /// An age: `90s`, `15m`, `2h`, `7d`, or whole seconds.
    pub older_than: Option<String>,
    pub error: Option<String>,
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn one_of(errs: &mut Vec<FieldError>, field: &str, v: &str, allowed: &[&str]) {
    if !allowed.contains(&v) {
        errs.push(FieldError::new(
            field,
            "not_allowed",
            format!("'{v}' is not one of: {}", allowed.join(", ")),
        ));
    }
}

/// Checks every field at once; an unknown status, queue or job type names the allowed
/// values. Status defaults to `dead`.
pub fn parse_filter(i: &FilterInput, now: DateTime<Utc>) -> Result<Filter, ApiError> {
    let mut errs = vec![];
    let status = given(&i.status).unwrap_or("dead");
    one_of(&mut errs, "status", status, STATUSES);
    for (field, v) in [("queue", &i.queue), ("job_type", &i.job_type)] {
        if let Some(v) = given(v) {
            one_of(&mut errs, field, v, QUEUES);
        }
    }
    let mut id = |field: &str, v: &Option<String>| {
        given(v).and_then(|raw| match Uuid::parse_str(raw) {
            Ok(u) => Some(u),
            Err(_) => {
                errs.push(FieldError::new(field, "invalid_uuid", "must be a UUID"));
                None
            }
        })
    };
    let integration_id = id("tenant", &i.tenant);
    let merchant_id = id("merchant", &i.merchant);
    let dead_before = given(&i.older_than).and_then(|raw| match parse_age(raw) {
        Some(age) => Some(now - age),
        None => {
            errs.push(FieldError::new(
                "older_than",
                "invalid",
                "an age such as 90s, 15m, 2h or 7d (at most 3650d)",
            ));
            None
        }
    });
    let error_contains = given(&i.error).map(str::to_string);
    if error_contains
        .as_ref()
        .is_some_and(|e| e.chars().count() > 200)
    {
        errs.push(FieldError::new(
            "error",
            "too_long",
            "at most 200 characters",
        ));
    }
    if !errs.is_empty() {
        return Err(ApiError::validation(errs));
    }
    Ok(Filter {
        status: Some(status.to_string()),
        queue: given(&i.queue).map(str::to_string),
        job_type: given(&i.job_type).map(str::to_string),
        integration_id,
        merchant_id,
        dead_before,
        error_contains,
    })
}

/// `90s`, `15m`, `2h`, `7d` or whole seconds, up to ten years.
pub fn parse_age(raw: &str) -> Option<Duration> {
    let raw = raw.trim();
    let (digits, unit) = match raw.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&raw[..i], c),
        _ => (raw, 's'),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    let secs = n.checked_mul(match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return None,
    })?;
    (secs <= 315_360_000).then(|| Duration::seconds(secs))
}

/// What the filter was, for the audit log and the tools' output.
pub fn describe(f: &Filter) -> Value {
    json!({
        "status": f.status, "queue": f.queue, "job_type": f.job_type,
        "tenant": f.integration_id, "merchant": f.merchant_id,
        "dead_before": f.dead_before, "error": f.error_contains,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_is_a_number_with_a_unit_of_seconds_minutes_hours_or_days() {
        assert_eq!(parse_age("90"), Some(Duration::seconds(90)));
        assert_eq!(parse_age("90s"), Some(Duration::seconds(90)));
        assert_eq!(parse_age("15m"), Some(Duration::minutes(15)));
        assert_eq!(parse_age("2h"), Some(Duration::hours(2)));
        assert_eq!(parse_age("7d"), Some(Duration::days(7)));
        for bad in [
            "",
            "h",
            "-1h",
            "1.5h",
            "2w",
            "3651d",
            "99999999999999999999",
        ] {
            assert_eq!(parse_age(bad), None, "{bad}");
        }
    }

    #[test]
    fn unknown_filter_values_are_refused_with_the_allowed_ones() {
        let e = parse_filter(
            &FilterInput {
                status: Some("dying".into()),
                queue: Some("emails".into()),
                merchant: Some("nope".into()),
                older_than: Some("2w".into()),
                ..FilterInput::default()
            },
            Utc::now(),
        )
        .unwrap_err()
        .to_body();
        let fields = e["details"]["fields"].as_array().unwrap();
        let of = |f: &str| fields.iter().find(|x| x["field"] == f).unwrap()["message"].clone();
        assert_eq!(
            of("status"),
            "'dying' is not one of: dead, replayed, purged"
        );
        assert_eq!(
            of("queue"),
            "'emails' is not one of: sms_send, webhook_deliver, webhook_batch, report_run"
        );
        assert!(of("merchant").is_string());
        assert!(of("older_than").is_string());
    }

    #[test]
    fn an_empty_filter_means_every_dead_letter() {
        let f = parse_filter(&FilterInput::default(), Utc::now()).unwrap();
        assert_eq!(
            f,
            Filter {
                status: Some("dead".into()),
                ..Filter::default()
            }
        );
    }
}
