//! Every error the suite meets must be one the live document lists for its operation: the
//! status among the operation's responses and the code in that response's
//! `x-error-codes`. `send` checks each reply, so the suite's hundreds of exchanges hold the
//! document's per-operation error lists to what the service really answers.
//! `WALLET_RECORD_ERRORS=<file>` also appends each `operationId status code` seen.
use std::{
    collections::HashMap,
    io::Write,
    sync::{Mutex, OnceLock},
};

use serde_json::Value;

/// Per operation (method and path template), its documented statuses and their codes.
pub(crate) struct Operation {
    method: String,
    pub(crate) segments: Vec<String>,
    pub(crate) id: String,
    errors: HashMap<u16, Vec<String>>,
}

fn operations() -> &'static [Operation] {
    static OPS: OnceLock<Vec<Operation>> = OnceLock::new();
    OPS.get_or_init(|| {
        let doc = api::http::openapi::build().document;
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in item.as_object().into_iter().flatten() {
                let Some(id) = op["operationId"].as_str() else {
                    continue;
                };
                let errors = op["responses"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(status, r)| {
                        let codes = r["x-error-codes"]
                            .as_array()?
                            .iter()
                            .filter_map(Value::as_str)
                            .map(String::from)
                            .collect();
                        Some((status.parse().ok()?, codes))
                    })
                    .collect();
                out.push(Operation {
                    method: method.to_uppercase(),
                    segments: path.split('/').map(String::from).collect(),
                    id: id.to_string(),
                    errors,
                });
            }
        }
        out
    })
}

/// The operation `method` `path` (below `/v1`) reaches: the template with the most literal
/// segments among those that match.
pub(crate) fn operation(method: &str, path: &str) -> Option<&'static Operation> {
    let got: Vec<&str> = path.split('/').collect();
    operations()
        .iter()
        .filter(|o| o.method == method && o.segments.len() == got.len())
        .filter(|o| {
            o.segments
                .iter()
                .zip(&got)
                .all(|(t, g)| t.starts_with('{') || t == g)
        })
        .max_by_key(|o| o.segments.iter().filter(|t| !t.starts_with('{')).count())
}

pub fn check(method: &str, url: &reqwest::Url, reply: &super::Reply) {
    if reply.status < 400 {
        return;
    }
    let Some(path) = url.path().strip_prefix("/v1") else {
        return;
    };
    let Some(code) = reply.body["error"]["code"].as_str() else {
        return;
    };
    // A path or method no operation serves (404/405) belongs to no operation.
    let Some(op) = operation(method, path) else {
        return;
    };
    if let Ok(file) = std::env::var("WALLET_RECORD_ERRORS") {
        append_line(&file, &format!("{} {} {code}", op.id, reply.status));
        return;
    }
    let listed = op
        .errors
        .get(&reply.status)
        .is_some_and(|codes| codes.iter().any(|c| c == code));
    assert!(
        listed,
        "{} ({method} {path}) answered {} {code}, which its document does not list: {:?}",
        op.id, reply.status, op.errors
    );
}

/// Appends one line to `file` (a recording the suite's threads share): one writer at a time,
/// so lines never interleave. A recording that cannot be written is skipped, not a failure.
pub(crate) fn append_line(file: &str, line: &str) {
    static LOCK: Mutex<()> = Mutex::new(());
    let _held = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
    {
        let _ = writeln!(f, "{line}");
    }
}
