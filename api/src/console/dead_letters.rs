//! Dead letters: counts per queue, a filtered list, one letter's whole story, and replay
//! or purge of one letter or of every letter matching the filter after a dry run.
use chrono::Utc;
use entities::dead_letter::DeadLetterStatus;
use maud::{Markup, html};
use poem::{
    Request, Response, handler,
    http::StatusCode,
    web::{Data, Form, Path, Query},
};
use uuid::Uuid;

use super::{Fields, error_page, layout, signed_in};
use crate::{
    domain::{
        operators::dead_letters::{self, Action, FilterInput, Outcome},
        outbox::job_requests::QUEUES,
    },
    state::AppState,
    store,
};

const PAGE: u64 = 50;
const PREVIEW: u64 = 20;
/// The filter's fields, as the form, the links and the bulk forms name them.
const FILTER_FIELDS: &[&str] = &[
    "status",
    "queue",
    "job_type",
    "tenant",
    "merchant",
    "older_than",
    "error",
];

fn input(f: &Fields) -> FilterInput {
    FilterInput {
        status: f.owned("status"),
        queue: f.owned("queue"),
        job_type: f.owned("job_type"),
        tenant: f.owned("tenant"),
        merchant: f.owned("merchant"),
        older_than: f.owned("older_than"),
        error: f.owned("error"),
    }
}

fn select(name: &str, current: Option<&str>, any: &str, values: &[&str]) -> Markup {
    html! {
        select name=(name) {
            option value="" { (any) }
            @for v in values {
                option value=(v) selected[current == Some(*v)] { (v) }
            }
        }
    }
}

fn filter_form(f: &Fields) -> Markup {
    html! {
        form.filters method="get" action="/ops/dead-letters" {
            label { "Status" (select("status", f.get("status"), "dead", &["replayed", "purged"])) }
            label { "Queue" (select("queue", f.get("queue"), "any", QUEUES)) }
            label { "Job type" (select("job_type", f.get("job_type"), "any", QUEUES)) }
            label { "Tenant (integration id)" input type="text" name="tenant" value=[f.get("tenant")] size="36"; }
            label { "Merchant id" input type="text" name="merchant" value=[f.get("merchant")] size="36"; }
            label { "Dead for at least" input type="text" name="older_than" value=[f.get("older_than")] placeholder="15m, 2h, 7d"; }
            label { "Error contains" input type="text" name="error" value=[f.get("error")]; }
            button type="submit" { "Filter" }
            a href="/ops/dead-letters" { "Clear" }
        }
    }
}

/// The filter as hidden fields, so a bulk form acts on exactly what is listed.
fn hidden_filter(f: &Fields) -> Markup {
    html! {
        @for k in FILTER_FIELDS {
            @if let Some(v) = f.get(k) { input type="hidden" name=(k) value=(v); }
        }
    }
}

fn letters_table(rows: &[entities::dead_letter::Model]) -> Markup {
    let now = Utc::now();
    html! {
        table.letters {
            thead { tr { th { "Dead letter" } th { "Queue" } th { "Merchant" } th { "Attempts" } th { "Died" } th { "Status" } th { "Last error" } } }
            tbody {
                @for d in rows {
                    tr {
                        td { a.id href={ "/ops/dead-letters/" (d.id) } { (d.id) } }
                        td { (d.queue) }
                        td.id { (d.merchant_id.map(|m| m.to_string()).unwrap_or_default()) }
                        td.num { (d.attempts) }
                        td title=(layout::ts(d.dead_at)) { (layout::ago(d.dead_at, now)) }
                        td class={ "state-" (d.status) } { (d.status) }
                        td.err { (d.last_error.chars().take(160).collect::<String>()) }
                    }
                }
            }
        }
    }
}

#[handler]
pub async fn list(req: &Request, state: Data<&AppState>, Query(q): Query<Fields>) -> Response {
    let st = state.0;
    let s = signed_in!(req, st);
    // Lag-tolerant: the replica serves it while it keeps up (store::db::replica).
    let read = st.lagging().await;
    let counts = match store::queues::dead_letters::dead_per_queue(&read.db).await {
        Ok(c) => c,
        Err(e) => return error_page(&s, &e.into()),
    };
    let filter = dead_letters::parse_filter(&input(&q), Utc::now());
    let before = q.get("before").and_then(|b| Uuid::parse_str(b).ok());
    let rows = match &filter {
        Ok(f) => match store::queues::dead_letters::list(&read.db, f, before, PAGE + 1).await {
            Ok(r) => r,
            Err(e) => return error_page(&s, &e.into()),
        },
        Err(_) => vec![],
    };
    let (rows, more) = crate::domain::page_of(rows, PAGE);
    let next = more
        .then(|| rows.last().map(|d| d.id.to_string()))
        .flatten();
    let total: i64 = counts.iter().map(|(_, n)| n).sum();
    let status = q.get("status").unwrap_or("dead");
    let params: Vec<(&str, Option<&str>)> = FILTER_FIELDS.iter().map(|k| (*k, q.get(k))).collect();
    let body = html! {
        div.chips {
            span.chip { "dead, all queues" b { (total) } }
            @for (queue, n) in &counts {
                a.chip href={ "/ops/dead-letters?queue=" (queue) } { (queue) b { (n) } }
            }
        }
        (filter_form(&q))
        @if let Err(e) = &filter {
            @for f in e.field_errors() {
                p.error { (f.field) ": " (f.message) }
            }
        } @else {
            @if rows.is_empty() {
                p.muted { "No dead letters match." }
            } @else {
                (letters_table(&rows))
                (layout::next_link("/ops/dead-letters", &params, next))
            }
            @if status == "dead" && !rows.is_empty() {
                h2 { "Act on every letter matching this filter" }
                form.action method="post" action="/ops/dead-letters/bulk" {
                    (layout::csrf(&s))
                    (hidden_filter(&q))
                    input type="hidden" name="step" value="preview";
                    label { "Action"
                        select name="action" { option value="replay" { "Replay" } option value="purge" { "Purge" } }
                    }
                    (layout::reason_field())
                    button type="submit" { "Preview (dry run)" }
                }
            }
        }
    };
    let status = if filter.is_err() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    layout::lagging_page(
        read.served,
        status,
        "Dead letters",
        Some(&s),
        "dead-letters",
        body,
    )
}

fn action_of(raw: Option<&str>) -> Option<Action> {
    match raw {
        Some("replay") => Some(Action::Replay),
        Some("purge") => Some(Action::Purge),
        _ => None,
    }
}

#[handler]
pub async fn bulk(req: &Request, state: Data<&AppState>, Form(f): Form<Fields>) -> Response {
    let st = state.0;
    let s = signed_in!(req, st, form = &f);
    let Some(action) = action_of(f.get("action")) else {
        return layout::problem(StatusCode::BAD_REQUEST, "Choose replay or purge.");
    };
    let reason = f.get("reason").unwrap_or_default();
    if let Err(e) = dead_letters::reason(reason) {
        return error_page(&s, &e);
    }
    let filter = match dead_letters::parse_filter(&input(&f), Utc::now()) {
        Ok(x) => x,
        Err(e) => return error_page(&s, &e),
    };
    let verb = match action {
        Action::Replay => "Replay",
        Action::Purge => "Purge",
    };
    if f.get("step") != Some("run") {
        let (n, first) = match dead_letters::preview(&st.db, &filter, PREVIEW).await {
            Ok(p) => p,
            Err(e) => return error_page(&s, &e),
        };
        let body = html! {
            p { "Dry run: " strong.count { (n) } " dead letter(s) match this filter now. Nothing has changed yet." }
            pre { (serde_json::to_string_pretty(&dead_letters::describe(&filter)).unwrap_or_default()) }
            @if n > PREVIEW { p.muted { "The newest " (PREVIEW) " are listed." } }
            (letters_table(&first))
            @if n > 0 {
                form.action method="post" action="/ops/dead-letters/bulk" {
                    (layout::csrf(&s))
                    (hidden_filter(&f))
                    input type="hidden" name="step" value="run";
                    input type="hidden" name="action" value=(f.get("action").unwrap_or_default());
                    input type="hidden" name="reason" value=(reason);
                    p { "Reason: " strong { (reason) } }
                    p.muted { "Letters that match when you confirm are acted on, each once; a letter replayed or purged meanwhile by someone else is left as it is." }
                    button.danger[action == Action::Purge] type="submit" { (verb) " " (n) " dead letter(s)" }
                }
            }
            p { a href="/ops/dead-letters" { "Cancel" } }
        };
        return layout::page(
            StatusCode::OK,
            &format!("{verb}: preview"),
            Some(&s),
            "dead-letters",
            body,
        );
    }
    let mut steps: Vec<(Uuid, String, String)> = vec![];
    let result = dead_letters::bulk(
        &st.db,
        &filter,
        action,
        &s.operator.actor(),
        reason,
        false,
        |step| {
            if steps.len() < 200 {
                let (outcome, error) = match step.outcome(action) {
                    Some((word, error)) => (word.to_string(), error.unwrap_or_default()),
                    None => ("-".to_string(), String::new()),
                };
                steps.push((step.letter.id, outcome, error));
            }
        },
    )
    .await;
    let sum = match result {
        Ok(sum) => sum,
        Err(e) => return error_page(&s, &e),
    };
    let body = html! {
        p.summary {
            strong { (sum.matched) } " matched: "
            strong { (sum.changed) } @if action == Action::Replay { " replayed" } @else { " purged" } ", "
            (sum.unchanged) " no longer dead (unchanged), "
            span class=[(sum.failed > 0).then_some("error")] { (sum.failed) " failed" } "."
        }
        p.muted { "Each letter and the whole action are in the " a href="/ops/audit" { "audit log" } "." }
        table {
            thead { tr { th { "Dead letter" } th { "Outcome" } th { "Error" } } }
            tbody {
                @for (id, outcome, error) in &steps {
                    tr { td { a.id href={ "/ops/dead-letters/" (id) } { (id) } } td { (outcome) } td.err { (error) } }
                }
            }
        }
        @if sum.matched as usize > steps.len() { p.muted { "The first " (steps.len()) " are listed." } }
        p { a href="/ops/dead-letters" { "Back to dead letters" } }
    };
    let status = if sum.failed > 0 {
        StatusCode::MULTI_STATUS
    } else {
        StatusCode::OK
    };
    layout::page(
        status,
        &format!("{verb}: done"),
        Some(&s),
        "dead-letters",
        body,
    )
}

#[handler]
pub async fn show(req: &Request, state: Data<&AppState>, Path(id): Path<String>) -> Response {
    let st = state.0;
    let s = signed_in!(req, st);
    // Lag-tolerant: the replica serves it while it keeps up (store::db::replica).
    let read = st.lagging().await;
    let Ok(id) = Uuid::parse_str(&id) else {
        return layout::problem(StatusCode::NOT_FOUND, "No such dead letter.");
    };
    let d = match store::queues::dead_letters::find(&read.db, id).await {
        Ok(Some(d)) => d,
        Ok(None) => return layout::problem(StatusCode::NOT_FOUND, "No such dead letter."),
        Err(e) => return error_page(&s, &e.into()),
    };
    let payload =
        serde_json::to_string_pretty(&dead_letters::redact(&d.payload)).unwrap_or_default();
    let attempts: Vec<serde_json::Value> = d.error_history.as_array().cloned().unwrap_or_default();
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| layout::ts(t.with_timezone(&Utc)))
            .unwrap_or_else(|_| s.clone()),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    let body = html! {
        dl.facts {
            dt { "Dead letter" } dd.id { (d.id) }
            dt { "Job" } dd.id { (d.job_id) }
            dt { "Queue / job type" } dd { (d.queue) " / " (d.job_type) }
            dt { "Merchant" } dd.id { (d.merchant_id.map(|m| m.to_string()).unwrap_or_else(|| "-".into())) }
            dt { "Status" } dd class={ "state-" (d.status) } { (d.status) }
            dt { "Attempts" } dd { (d.attempts) }
            dt { "First enqueued" } dd { (layout::ts(d.first_enqueued_at)) }
            dt { "Died" } dd { (layout::ts(d.dead_at)) }
            dt { "Replayed" } dd { (d.replay_count) " time(s)" @if let Some(t) = d.replayed_at { ", last " (layout::ts(t)) } }
            @if let Some(r) = &d.purge_reason { dt { "Purged because" } dd { (r) } }
            dt { "Last error" } dd.err { (d.last_error) }
        }
        h2 { "Attempts" }
        table.attempts {
            thead { tr { th { "#" } th { "At" } th { "Error" } } }
            tbody {
                @for a in &attempts {
                    tr { td.num { (text(&a["attempt"])) } td { (text(&a["at"])) } td.err { (text(&a["error"])) } }
                }
            }
        }
        h2 { "Payload " span.muted { "(secrets redacted)" } }
        pre.payload { (payload) }
        @if d.status == DeadLetterStatus::Dead {
            h2 { "Act on this letter" }
            form.action method="post" action={ "/ops/dead-letters/" (d.id) "/replay" } {
                (layout::csrf(&s)) (layout::reason_field())
                button type="submit" { "Replay" }
            }
            form.action method="post" action={ "/ops/dead-letters/" (d.id) "/purge" } {
                (layout::csrf(&s)) (layout::reason_field())
                button.danger type="submit" { "Purge" }
            }
        }
        p { a href="/ops/dead-letters" { "Back to dead letters" } }
    };
    layout::lagging_page(
        read.served,
        StatusCode::OK,
        "Dead letter",
        Some(&s),
        "dead-letters",
        body,
    )
}

#[handler]
pub async fn act_one(
    req: &Request,
    state: Data<&AppState>,
    Path((id, action)): Path<(String, String)>,
    Form(f): Form<Fields>,
) -> Response {
    let st = state.0;
    let s = signed_in!(req, st, form = &f);
    let (Ok(id), Some(action)) = (Uuid::parse_str(&id), action_of(Some(&action))) else {
        return layout::problem(StatusCode::NOT_FOUND, "No such action.");
    };
    let reason = f.get("reason").unwrap_or_default();
    let actor = s.operator.actor();
    let out = dead_letters::act(&st.db, action, id, &actor, reason).await;
    let out = match out {
        Ok(o) => o,
        Err(e) => return error_page(&s, &e),
    };
    let body = html! {
        @match &out {
            Outcome::Done(Some(job)) => p.okay { "Replayed: new job " code { (job) } "." },
            Outcome::Done(None) => p.okay { "Purged." },
            Outcome::NotDead(status) => p.warn { "Nothing changed: the letter was already " (status) "." },
        }
        p { a href={ "/ops/dead-letters/" (id) } { "Back to the letter" } " · " a href="/ops/dead-letters" { "Dead letters" } }
    };
    layout::page(
        StatusCode::OK,
        "Dead letter",
        Some(&s),
        "dead-letters",
        body,
    )
}
