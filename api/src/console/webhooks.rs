//! Webhook endpoints of every tenant: success rate and latency over the last 24 hours,
//! the last failures, the failure streak, auto-disabled endpoints with a re-enable, and
//! "recover since T" (send again what failed or was held back) after a preview.
use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use maud::html;
use poem::{
    Request, Response, handler,
    http::StatusCode,
    web::{Data, Form, Path, Query},
};
use uuid::Uuid;

use super::{Fields, error_page, layout, signed_in};
use crate::{domain::webhooks, state::AppState, store};

const PAGE: u64 = 25;
/// Attempts read per endpoint for its 24-hour figures.
const SAMPLE: u64 = 500;

struct Stats {
    attempts: usize,
    success_pct: Option<f64>,
    p50_ms: Option<i64>,
    p95_ms: Option<i64>,
}

fn stats(attempts: &[entities::webhook_attempt::Model]) -> Stats {
    let mut lat: Vec<i64> = attempts.iter().map(|a| a.latency_ms).collect();
    lat.sort_unstable();
    let pct = |p: f64| -> Option<i64> {
        (!lat.is_empty()).then(|| lat[((lat.len() - 1) as f64 * p).round() as usize])
    };
    Stats {
        attempts: attempts.len(),
        success_pct: (!attempts.is_empty()).then(|| {
            attempts.iter().filter(|a| a.succeeded).count() as f64 * 100.0 / attempts.len() as f64
        }),
        p50_ms: pct(0.5),
        p95_ms: pct(0.95),
    }
}

#[handler]
pub async fn list(req: &Request, state: Data<&AppState>, Query(q): Query<Fields>) -> Response {
    let st = state.0;
    let s = signed_in!(req, st);
    // Lag-tolerant: the replica serves it while it keeps up (store::db::replica).
    let read = st.lagging().await;
    let integration = q.get("tenant").and_then(|t| Uuid::parse_str(t).ok());
    let state_filter = q
        .get("state")
        .filter(|v| webhooks::SubscriptionState::parse(v).is_some());
    let before = q.get("before").and_then(|b| Uuid::parse_str(b).ok());
    let rows = match store::webhooks::subscriptions_for_ops(
        &read.db,
        integration,
        state_filter,
        before,
        PAGE + 1,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return error_page(&s, &e.into()),
    };
    let (rows, more) = crate::domain::page_of(rows, PAGE);
    let now = Utc::now();
    let mut details = vec![];
    for sub in &rows {
        let recent =
            store::webhooks::recent_attempts(&read.db, sub.id, now - Duration::hours(24), SAMPLE)
                .await;
        let failures = store::webhooks::last_failures(&read.db, sub.id, 3).await;
        match (recent, failures) {
            (Ok(r), Ok(f)) => details.push((stats(&r), f)),
            (Err(e), _) | (_, Err(e)) => return error_page(&s, &e.into()),
        }
    }
    let next = more
        .then(|| rows.last().map(|x| x.id.to_string()))
        .flatten();
    let params = [("tenant", q.get("tenant")), ("state", state_filter)];
    let since_default = (now - Duration::hours(24))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let body = html! {
        form.filters method="get" action="/ops/webhooks" {
            label { "Tenant (integration id)" input type="text" name="tenant" value=[q.get("tenant")] size="36"; }
            label { "State" select name="state" {
                option value="" { "any" }
                option value="ACTIVE" selected[state_filter == Some("ACTIVE")] { "ACTIVE" }
                option value="DISABLED" selected[state_filter == Some("DISABLED")] { "DISABLED" }
            } }
            button type="submit" { "Filter" }
        }
        @if rows.is_empty() { p.muted { "No endpoints match." } }
        @for (sub, (st24, failures)) in rows.iter().zip(&details) {
            section.panel.endpoint {
                div {
                    h2 { code { (sub.url) } }
                    p.muted { "Endpoint " span.id { (sub.id) } " · tenant " span.id { (sub.integration_id) }
                        @if sub.is_sandbox { " · sandbox" } }
                    dl.facts {
                        dt { "State" } dd class={ "state-" (sub.state) } { (sub.state)
                            @if let Some(r) = &sub.disabled_reason { " (" (r) @if let Some(t) = sub.disabled_at { ", " (layout::ago(t, now)) } ")" } }
                        dt { "Consecutive failures" } dd { (sub.failure_streak)
                            @if let Some(t) = sub.failing_since { " · failing since " (layout::ts(t)) } }
                        dt { "Last 24 h" } dd {
                            @match st24.success_pct {
                                Some(p) => { (format!("{p:.1}")) "% of " (st24.attempts) " attempt(s) succeeded" },
                                None => { "no attempts" },
                            }
                            @if let (Some(p50), Some(p95)) = (st24.p50_ms, st24.p95_ms) { " · latency p50 " (p50) " ms, p95 " (p95) " ms" }
                            @if st24.attempts as u64 == SAMPLE { " (newest " (SAMPLE) ")" }
                        }
                    }
                    @if !failures.is_empty() {
                        table.failures {
                            thead { tr { th { "Last failures" } th { "Status" } th { "Error" } } }
                            tbody { @for a in failures {
                                tr { td { (layout::ts(a.started_at)) } td { (a.status_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into())) } td.err { (a.error.clone().unwrap_or_default()) } }
                            } }
                        }
                    }
                    @if sub.state == webhooks::DISABLED {
                        form.action method="post" action={ "/ops/webhooks/" (sub.id) "/enable" } {
                            (layout::csrf(&s)) (layout::reason_field())
                            label { "Send what it missed" input type="checkbox" name="replay_missed" value="yes" checked; }
                            button type="submit" { "Re-enable" }
                        }
                    }
                    form.action method="post" action={ "/ops/webhooks/" (sub.id) "/recover" } {
                        (layout::csrf(&s))
                        label { "Recover deliveries since (UTC)" input type="datetime-local" name="since" value=(since_default) required; }
                        (layout::reason_field())
                        input type="hidden" name="step" value="preview";
                        button.plain type="submit" { "Preview recovery" }
                    }
                }
            }
        }
        (layout::next_link("/ops/webhooks", &params, next))
    };
    layout::lagging_page(
        read.served,
        StatusCode::OK,
        "Webhook endpoints",
        Some(&s),
        "webhooks",
        body,
    )
}

#[handler]
pub async fn enable(
    req: &Request,
    state: Data<&AppState>,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let st = state.0;
    let s = signed_in!(req, st, form = &f);
    let Ok(id) = Uuid::parse_str(&id) else {
        return layout::problem(StatusCode::NOT_FOUND, "No such endpoint.");
    };
    let replay = f.get("replay_missed").is_some();
    let (actor, reason) = (s.operator.actor(), f.get("reason").unwrap_or_default());
    let enabled = store::in_transaction(&st.db, async |txn| {
        webhooks::operator_enable(txn, &actor, id, replay, reason).await
    })
    .await;
    match enabled {
        Ok((sub, missed, replayed)) => layout::page(
            StatusCode::OK,
            "Endpoint re-enabled",
            Some(&s),
            "webhooks",
            html! {
                p.okay { code { (sub.url) } " is " (sub.state) " again." }
                p { (missed) " delivery(ies) were held while it was disabled; " (replayed) " are being sent now." }
                p { a href="/ops/webhooks" { "Back to endpoints" } }
            },
        ),
        Err(e) => error_page(&s, &e),
    }
}

fn parse_since(raw: Option<&str>) -> Option<DateTime<Utc>> {
    let raw = raw?;
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M")
                .ok()
                .map(|n| n.and_utc())
        })
        .or_else(|| {
            NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S")
                .ok()
                .map(|n| n.and_utc())
        })
}

#[handler]
pub async fn recover(
    req: &Request,
    state: Data<&AppState>,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let st = state.0;
    let s = signed_in!(req, st, form = &f);
    let Ok(id) = Uuid::parse_str(&id) else {
        return layout::problem(StatusCode::NOT_FOUND, "No such endpoint.");
    };
    let Some(since) = parse_since(f.get("since")) else {
        return layout::problem(
            StatusCode::BAD_REQUEST,
            "Give the time to recover from, such as 2026-11-27T09:30 (UTC).",
        );
    };
    let reason = f.get("reason").unwrap_or_default();
    if let Err(e) = crate::domain::operators::dead_letters::reason(reason) {
        return error_page(&s, &e);
    }
    if f.get("step") != Some("run") {
        let (sub, n) = match webhooks::recoverable(&st.db, id, since).await {
            Ok(x) => x,
            Err(e) => return error_page(&s, &e),
        };
        let body = html! {
            p { "Dry run: " strong.count { (n) } " delivery(ies) to " code { (sub.url) } " failed for good or were held back since " (layout::ts(since)) ". Nothing has changed yet." }
            @if n > 0 {
                form.action method="post" action={ "/ops/webhooks/" (id) "/recover" } {
                    (layout::csrf(&s))
                    input type="hidden" name="since" value=(since.to_rfc3339());
                    input type="hidden" name="reason" value=(reason);
                    input type="hidden" name="step" value="run";
                    p { "Reason: " strong { (reason) } }
                    button type="submit" { "Send " (n) " again" }
                }
            }
            p { a href="/ops/webhooks" { "Cancel" } }
        };
        return layout::page(
            StatusCode::OK,
            "Recover deliveries: preview",
            Some(&s),
            "webhooks",
            body,
        );
    }
    let actor = s.operator.actor();
    let recovered = store::in_transaction(&st.db, async |txn| {
        webhooks::operator_recover(txn, &actor, id, since, reason).await
    })
    .await;
    match recovered {
        Ok(n) => layout::page(
            StatusCode::OK,
            "Recover deliveries: done",
            Some(&s),
            "webhooks",
            html! {
                p.okay { (n) " delivery(ies) are being sent again, in order per resource." }
                p { a href="/ops/webhooks" { "Back to endpoints" } }
            },
        ),
        Err(e) => error_page(&s, &e),
    }
}
