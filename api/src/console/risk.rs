//! Risk: the terminals, branches and merchants blocked for failed credentials, and the
//! wallets and terminals at a velocity limit, newest crossing first, with the latest
//! failed attempts of each failure block and a clear action (a reason required, audited).
//! The operator API (`GET /v1/operator/risk/blocks`) lists the same.
use maud::html;
use poem::{
    Request, Response, handler,
    http::StatusCode,
    web::{Data, Form, Path, Query},
};
use uuid::Uuid;

use super::layout::{self, Fields, error_page};
use crate::{
    domain::risk::{blocks, crossings},
    state::AppState,
    store,
};

const PAGE: u64 = 100;

#[handler]
pub async fn list(req: &Request, state: Data<&AppState>, Query(q): Query<Fields>) -> Response {
    let st = state.0;
    let s = match layout::operator(req, st).await {
        Ok(s) => s,
        Err(to_login) => return to_login,
    };
    let merchant = q.get("merchant").and_then(|m| Uuid::parse_str(m).ok());
    let guard = st.guard();
    let found = match blocks::active(&guard.failures(), merchant, PAGE).await {
        Ok(f) => f,
        Err(e) => return error_page(&s, &e),
    };
    let now = chrono::Utc::now();
    let body = html! {
        form.filters method="get" action="/ops/risk" {
            label { "Merchant id" input type="text" name="merchant" value=[q.get("merchant")] size="36"; }
            button type="submit" { "Filter" }
        }
        @if found.is_empty() { p.muted { "No blocks in force." } }
        @for b in &found {
            @let r = &b.row;
            section.panel.block {
                h2 { (r.scope) " " code { (crossings::subject_view(&r.scope, &r.subject).to_string()) } }
                p.muted { "Merchant " span.id { (r.merchant_id) } @if r.is_sandbox { " · sandbox" } " · block " span.id { (r.id) } }
                dl.facts {
                    dt { "Rule" } dd { (r.rule) " (" (r.threshold) " in " (r.window_secs) " s)" }
                    dt { "Counted" } dd { (r.observed) }
                    dt { "Since" } dd { (layout::ts(r.crossed_at)) " (" (layout::ago(r.crossed_at, now)) ")" }
                    dt { "Until" } dd { (layout::ts(r.until)) }
                    dt { "Crossings" } dd { (r.crossings) }
                }
                @if !b.last_attempts.is_empty() {
                    table.failures {
                        thead { tr { th { "Last attempts" } th { "What (request id)" } } }
                        tbody { @for a in &b.last_attempts {
                            tr { td { (layout::ts(a.at)) } td { code { (a.note) } } }
                        } }
                    }
                }
                @if r.rule == crate::domain::risk::failures::RULE {
                    form.action method="post" action={ "/ops/risk/" (r.id) "/clear" } {
                        (layout::csrf(&s)) (layout::reason_field())
                        button type="submit" { "Clear block" }
                    }
                } @else {
                    p.muted { "A velocity limit: it ends as its window moves on, or when the merchant changes its limits." }
                }
            }
        }
    };
    layout::page(StatusCode::OK, "Risk", Some(&s), "risk", body)
}

#[handler]
pub async fn clear(
    req: &Request,
    state: Data<&AppState>,
    Path(id): Path<String>,
    Form(f): Form<Fields>,
) -> Response {
    let st = state.0;
    let s = match layout::operator_form(req, st, &f).await {
        Ok(s) => s,
        Err(refusal) => return refusal,
    };
    let Ok(id) = Uuid::parse_str(&id) else {
        return layout::problem(StatusCode::NOT_FOUND, "No such block.");
    };
    let Some(reason) = f.get("reason") else {
        return layout::problem(StatusCode::BAD_REQUEST, "A reason is required.");
    };
    let actor = s.operator.actor();
    let guard = st.guard();
    let failures = guard.failures();
    let cleared = store::in_transaction(&st.db, async |txn| {
        blocks::clear(txn, &failures, id, &actor, reason).await
    })
    .await;
    match cleared {
        Ok(b) => layout::page(
            StatusCode::OK,
            "Block cleared",
            Some(&s),
            "risk",
            html! {
                p.okay { "The " (b.scope) " " code { (crossings::subject_view(&b.scope, &b.subject).to_string()) } " may enter credentials again." }
                p { a href="/ops/risk" { "Back to risk" } }
            },
        ),
        Err(e) => error_page(&s, &e),
    }
}
