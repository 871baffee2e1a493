//! The audit log: every operator action, filtered by operator, action, target and time.
use chrono::{DateTime, NaiveDate, Utc};
use maud::html;
use poem::{
    Request, Response, handler,
    http::StatusCode,
    web::{Data, Query},
};
use uuid::Uuid;

use super::{Fields, error_page, layout, signed_in};
use crate::{state::AppState, store};

const PAGE: u64 = 50;

/// The actions the log records, for the filter's choices.
const ACTIONS: &[&str] = &[
    "console.sign_in",
    "dead_letter.replay",
    "dead_letter.purge",
    "dead_letter.bulk_replay",
    "dead_letter.bulk_purge",
    "integration.suspend",
    "integration.reactivate",
    "integration.identify_credential_types",
    "integration.cors_origins",
    "webhook_endpoint.enable",
    "webhook_endpoint.recover",
    crate::domain::operators::LEDGER_CHECK,
    "operator.create",
];

fn day(raw: Option<&str>) -> Option<DateTime<Utc>> {
    NaiveDate::parse_from_str(raw?, "%Y-%m-%d")
        .ok()?
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc())
}

#[handler]
pub async fn list(req: &Request, state: Data<&AppState>, Query(q): Query<Fields>) -> Response {
    let st = state.0;
    let s = signed_in!(req, st);
    // Lag-tolerant: the replica serves it while it keeps up (store::db::replica).
    let read = st.lagging().await;
    let operators = match store::credentials::operators::all(&read.db).await {
        Ok(o) => o,
        Err(e) => return error_page(&s, &e.into()),
    };
    let f = store::credentials::operators::AuditFilter {
        actor: q.owned("actor"),
        action: q.owned("action"),
        target_id: q.owned("target"),
        since: day(q.get("since")),
        // "until" is inclusive of the day named.
        until: day(q.get("until")).map(|t| t + chrono::Duration::days(1)),
    };
    let before = q.get("before").and_then(|b| Uuid::parse_str(b).ok());
    let rows = match store::credentials::operators::audit_page(&read.db, &f, before, PAGE + 1).await
    {
        Ok(r) => r,
        Err(e) => return error_page(&s, &e.into()),
    };
    let (rows, more) = crate::domain::page_of(rows, PAGE);
    let next = more
        .then(|| rows.last().map(|x| x.id.to_string()))
        .flatten();
    let params = [
        ("actor", q.get("actor")),
        ("action", q.get("action")),
        ("target", q.get("target")),
        ("since", q.get("since")),
        ("until", q.get("until")),
    ];
    let body = html! {
        form.filters method="get" action="/ops/audit" {
            label { "Operator" select name="actor" {
                option value="" { "anyone" }
                @for o in &operators {
                    @let actor = crate::domain::operators::Operator { id: o.id, name: o.name.clone() }.actor();
                    option value=(actor) selected[q.get("actor") == Some(actor.as_str())] { (o.name) }
                }
            } }
            label { "Action" select name="action" {
                option value="" { "any" }
                @for a in ACTIONS { option value=(a) selected[q.get("action") == Some(*a)] { (a) } }
            } }
            label { "Target id (tenant, letter, endpoint)" input type="text" name="target" value=[q.get("target")] size="36"; }
            label { "From (day, UTC)" input type="date" name="since" value=[q.get("since")]; }
            label { "To (day, UTC)" input type="date" name="until" value=[q.get("until")]; }
            button type="submit" { "Filter" }
            a href="/ops/audit" { "Clear" }
        }
        @if rows.is_empty() { p.muted { "No entries match." } } @else {
            table.audit {
                thead { tr { th { "When" } th { "Who" } th { "Action" } th { "Target" } th { "Reason" } th { "Details" } } }
                tbody { @for r in &rows {
                    tr {
                        td { (layout::ts(r.created_at)) }
                        td { (r.actor) }
                        td { code { (r.action) } }
                        td.id { (r.target_type) " " (r.target_id.clone().unwrap_or_default()) }
                        td { (r.reason.clone().unwrap_or_default()) }
                        td { code { (r.details.to_string()) } }
                    }
                } }
            }
            (layout::next_link("/ops/audit", &params, next))
        }
    };
    layout::lagging_page(
        read.served,
        StatusCode::OK,
        "Audit log",
        Some(&s),
        "audit",
        body,
    )
}
