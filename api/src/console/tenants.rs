//! Tenants (integrations): search, status, sandbox flag, key counts, and suspend or
//! reactivate with a reason (the same domain action as the operator HTTP API).
use std::collections::HashMap;

use entities::{api_key::ApiKeyStatus, integration::IntegrationStatus};
use maud::html;
use poem::{
    Request, Response, handler,
    http::StatusCode,
    web::{Data, Form, Path, Query},
};
use uuid::Uuid;

use super::{Fields, error_page, layout, signed_in};
use crate::{domain::operators, state::AppState, store};

const PAGE: u64 = 50;

#[handler]
pub async fn list(req: &Request, state: Data<&AppState>, Query(q): Query<Fields>) -> Response {
    let st = state.0;
    let s = signed_in!(req, st);
    // Lag-tolerant: the replica serves it while it keeps up (store::db::replica).
    let read = st.lagging().await;
    let status = q
        .get("status")
        .filter(|v| IntegrationStatus::parse(v).is_some());
    let sandbox = match q.get("sandbox") {
        Some("yes") => Some(true),
        Some("no") => Some(false),
        _ => None,
    };
    let search = q.get("q");
    let before = q.get("before").and_then(|b| Uuid::parse_str(b).ok());
    // An id pasted into the search box finds that tenant.
    let rows = if let Some(id) = search.and_then(|v| Uuid::parse_str(v).ok()) {
        store::tenancy::find_integration(&read.db, id)
            .await
            .map(|r| r.into_iter().collect())
    } else {
        store::tenancy::integrations_page(&read.db, search, status, sandbox, before, PAGE + 1).await
    };
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return error_page(&s, &e.into()),
    };
    let (rows, more) = crate::domain::page_of(rows, PAGE);
    let ids: Vec<Uuid> = rows.iter().map(|i| i.id).collect();
    let mut keys: HashMap<Uuid, (i64, i64)> = HashMap::new();
    match store::tenancy::key_counts(&read.db, &ids).await {
        Ok(counts) => {
            for (i, key_status, n) in counts {
                let e = keys.entry(i).or_default();
                if key_status == ApiKeyStatus::Active {
                    e.0 += n;
                }
                e.1 += n;
            }
        }
        Err(e) => return error_page(&s, &e.into()),
    }
    let next = more
        .then(|| rows.last().map(|x| x.id.to_string()))
        .flatten();
    let params = [
        ("q", search),
        ("status", status),
        ("sandbox", q.get("sandbox")),
    ];
    let body = html! {
        form.filters method="get" action="/ops/tenants" {
            label { "Name or id" input type="search" name="q" value=[search]; }
            label { "Status" select name="status" {
                option value="" { "any" }
                option value="ACTIVE" selected[status == Some("ACTIVE")] { "ACTIVE" }
                option value="SUSPENDED" selected[status == Some("SUSPENDED")] { "SUSPENDED" }
            } }
            label { "Sandbox" select name="sandbox" {
                option value="" { "any" }
                option value="yes" selected[sandbox == Some(true)] { "sandbox only" }
                option value="no" selected[sandbox == Some(false)] { "live only" }
            } }
            button type="submit" { "Search" }
        }
        @if rows.is_empty() { p.muted { "No tenants match." } } @else {
            table.tenants {
                thead { tr { th { "Tenant" } th { "Integration id" } th { "Status" } th { "Sandbox" } th { "Keys (active / all)" } th { "Created" } th { "Action" } } }
                tbody { @for i in &rows {
                    @let (active, all) = keys.get(&i.id).copied().unwrap_or_default();
                    tr {
                        td { (i.name) }
                        td.id { (i.id) " " a href={ "/ops/dead-letters?tenant=" (i.id) } { "letters" } " " a href={ "/ops/webhooks?tenant=" (i.id) } { "endpoints" } }
                        td class={ "state-" (i.status) } { (i.status) }
                        td { @if i.is_sandbox { "sandbox" } @else { "live" } }
                        td.num { (active) " / " (all) }
                        td { (layout::ts(i.created_at)) }
                        td {
                            @let (to, label) = if i.status == IntegrationStatus::Active { ("suspend", "Suspend") } else { ("reactivate", "Reactivate") };
                            form.action method="post" action={ "/ops/tenants/" (i.id) "/" (to) } {
                                (layout::csrf(&s)) (layout::reason_field())
                                button class=[(to == "suspend").then_some("danger")] type="submit" { (label) }
                            }
                        }
                    }
                } }
            }
            (layout::next_link("/ops/tenants", &params, next))
        }
    };
    layout::lagging_page(
        read.served,
        StatusCode::OK,
        "Tenants",
        Some(&s),
        "tenants",
        body,
    )
}

#[handler]
pub async fn set_status(
    req: &Request,
    state: Data<&AppState>,
    Path((id, action)): Path<(String, String)>,
    Form(f): Form<Fields>,
) -> Response {
    let st = state.0;
    let s = signed_in!(req, st, form = &f);
    let to = match action.as_str() {
        "suspend" => operators::IntegrationChange::Suspend,
        "reactivate" => operators::IntegrationChange::Reactivate,
        _ => return layout::problem(StatusCode::NOT_FOUND, "No such action."),
    };
    let Ok(id) = Uuid::parse_str(&id) else {
        return layout::problem(StatusCode::NOT_FOUND, "No such tenant.");
    };
    let reason =
        match crate::domain::operators::dead_letters::reason(f.get("reason").unwrap_or_default()) {
            Ok(r) => r.to_string(),
            Err(e) => return error_page(&s, &e),
        };
    match operators::change_integration_status(
        &st.db,
        &st.key_auth(),
        &st.standing(),
        &s.operator,
        id,
        to,
        reason,
    )
    .await
    {
        Ok(i) => layout::page(
            StatusCode::OK,
            "Tenant updated",
            Some(&s),
            "tenants",
            html! {
                p.okay { (i.name) " is " (i.status) "." }
                @if i.status == IntegrationStatus::Suspended { p { "Its keys and terminal tokens stopped working on every replica." } }
                p { a href="/ops/tenants" { "Back to tenants" } }
            },
        ),
        Err(e) => error_page(&s, &e),
    }
}
