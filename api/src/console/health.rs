//! Health: degraded subsystems, the outbox's lag, queue depths, dead letters per queue,
//! and the last ledger check (with a button to run one now).
use chrono::Utc;
use maud::html;
use poem::{
    Request, Response, handler,
    http::StatusCode,
    web::{Data, Form},
};

use super::{Fields, error_page, layout, signed_in};
use crate::{domain::operators, state::AppState, store};

#[handler]
pub async fn page(req: &Request, state: Data<&AppState>) -> Response {
    let st = state.0;
    let s = signed_in!(req, st);
    // Lag-tolerant: the replica serves it while it keeps up (store::db::replica).
    let read = st.lagging().await;
    let now = Utc::now();
    let health = st.health().await;
    let (lag, pending, depth, dead, last_check) = tokio::join!(
        store::outbox::oldest_pending_age(&read.db, now),
        store::outbox::pending_count(&read.db),
        st.queue.depth(),
        store::queues::dead_letters::dead_per_queue(&read.db),
        operators::last_ledger_check(&read.db),
    );
    let body = html! {
        h2 { "Subsystems" }
        @if health.degraded.is_empty() {
            p.okay { "All subsystems answer (database, Redis, job queue). Mode: " (health.mode) "." }
        } @else {
            p.error { "Degraded: " (health.degraded.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")) ". Mode: " (health.mode) "." }
        }
        h2 { "Outbox" }
        @match (&lag, &pending) {
            (Ok(lag), Ok(n)) => p class=(if *lag > 60.0 { "warn" } else { "" }) {
                (n) " event(s) waiting for the relay; the oldest has waited " (format!("{lag:.1}")) " s."
            },
            _ => p.error { "The outbox could not be read." },
        }
        h2 { "Job queues" }
        @match &depth {
            Ok(rows) => {
                @if rows.is_empty() { p.muted { "No jobs." } } @else {
                    table.queues {
                        thead { tr { th { "Queue" } th { "Status" } th { "Jobs" } } }
                        tbody { @for (q, status, n) in rows { tr { td { (q) } td { (status) } td.num { (n) } } } }
                    }
                }
            },
            Err(_) => p.error { "The job queue could not be read." },
        }
        h2 { "Dead letters" }
        @match &dead {
            Ok(rows) if rows.is_empty() => p.okay { "None." },
            Ok(rows) => p.warn {
                @for (q, n) in rows { a href={ "/ops/dead-letters?queue=" (q) } { (q) ": " (n) } " " }
            },
            Err(_) => p.error { "Dead letters could not be read." },
        }
        h2 { "Ledger check" }
        @match &last_check {
            Ok(Some(c)) => {
                @let ok = c.details["consistent"].as_bool() == Some(true);
                p class=(if ok { "okay" } else { "error" }) {
                    @if ok { "Consistent" } @else { "INCONSISTENT" }
                    ": " (c.details["postings"]) " postings, " (c.details["entries"]) " entries; "
                    (c.details["unbalanced_postings"]) " unbalanced postings, "
                    (c.details["wallet_mismatches"]) " wallet and " (c.details["grant_mismatches"]) " grant balance mismatches."
                }
                p.muted { "Last run " (layout::ago(c.created_at, now)) " (" (layout::ts(c.created_at)) ") by " (c.actor)
                    @if let Some(m) = &c.target_id { ", merchant " (m) } "." }
            },
            Ok(None) => p.warn { "No ledger check has run yet." },
            Err(_) => p.error { "The last ledger check could not be read." },
        }
        form.action method="post" action="/ops/health/ledger-check" {
            (layout::csrf(&s))
            button type="submit" { "Run the ledger check now" }
        }
    };
    layout::lagging_page(
        read.served,
        StatusCode::OK,
        "Health",
        Some(&s),
        "health",
        body,
    )
}

#[handler]
pub async fn ledger_check(
    req: &Request,
    state: Data<&AppState>,
    Form(f): Form<Fields>,
) -> Response {
    let st = state.0;
    let s = signed_in!(req, st, form = &f);
    match operators::check_ledger(&st.db, &s.operator.actor(), None, false).await {
        Ok(_) => poem::IntoResponse::into_response(poem::web::Redirect::see_other("/ops/health")),
        Err(e) => error_page(&s, &e),
    }
}
