//! Liability: for one merchant, the daily closing liability by class over a chosen range
//! as a chart drawn on the server (SVG; the console runs no script), the figures beneath
//! it, and the merchant's latest report runs with their files to download.
use chrono::{Duration, NaiveDate, Utc};
use maud::{Markup, html};
use poem::{Body, Request, Response, handler, http::StatusCode, web::Data, web::Path};
use uuid::Uuid;

use super::layout::{self, error_page};
use crate::domain::ledger::classes::ValueClass;
use crate::domain::ledger::liability::{self, Liability, MAX_DAILY_DAYS};
use crate::domain::ledger::reports;
use crate::state::AppState;

/// The liability classes, bottom to top of the chart.
const STACK: [ValueClass; 4] = [
    ValueClass::Actual,
    ValueClass::PromoReleased,
    ValueClass::PromoLocked,
    ValueClass::Escrow,
];

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 70.0;
const BOTTOM: f64 = 24.0;
const TOP: f64 = 10.0;

fn money(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", minor.abs() / 100, minor.abs() % 100)
}

/// A stacked area chart of `days` (each the merchant's line in one currency, or none).
fn chart(days: &[(NaiveDate, Option<&Liability>)]) -> Markup {
    let max = days
        .iter()
        .filter_map(|(_, l)| l.map(|l| l.total_minor()))
        .max()
        .unwrap_or(0)
        .max(1);
    let n = days.len().max(2) - 1;
    let x = |i: usize| LEFT + (WIDTH - LEFT - 30.0) * i as f64 / n as f64;
    let y = |v: i64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - v as f64 / max as f64);
    // Cumulative heights per layer, so each band sits on the ones below.
    let level = |i: usize, upto: usize| -> i64 {
        days[i]
            .1
            .map(|l| STACK[..upto].iter().map(|c| l.class_minor(*c)).sum())
            .unwrap_or(0)
    };
    let band = |k: usize| -> String {
        let top: Vec<String> = (0..days.len())
            .map(|i| format!("{:.1},{:.1}", x(i), y(level(i, k + 1))))
            .collect();
        let bottom: Vec<String> = (0..days.len())
            .rev()
            .map(|i| format!("{:.1},{:.1}", x(i), y(level(i, k))))
            .collect();
        format!("{} {}", top.join(" "), bottom.join(" "))
    };
    let label_every = (days.len() / 8).max(1);
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) }
            role="img" aria-label="Daily closing liability by class" {
            @for k in 0..STACK.len() {
                polygon class={ "band c-" (STACK[k].as_str()) } points=(band(k)) {}
            }
            line.axis x1=(LEFT) y1=(HEIGHT - BOTTOM) x2=(WIDTH - 30.0) y2=(HEIGHT - BOTTOM) {}
            line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(HEIGHT - BOTTOM) {}
            text.tick x=(LEFT - 6.0) y=(TOP + 4.0) text-anchor="end" { (money(max)) }
            text.tick x=(LEFT - 6.0) y=(HEIGHT - BOTTOM) text-anchor="end" { "0.00" }
            @for (i, (d, _)) in days.iter().enumerate() {
                @if i % label_every == 0 {
                    text.tick x=(x(i)) y=(HEIGHT - 6.0) text-anchor="middle" { (d.format("%m-%d")) }
                }
            }
        }
        p.legend {
            @for c in STACK { span class={ "key c-" (c.as_str()) } { (c.as_str()) } " " }
        }
    }
}

#[derive(serde::Deserialize, Default)]
struct Query {
    merchant: Option<String>,
    currency: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

#[handler]
pub async fn page(req: &Request, state: Data<&AppState>) -> Response {
    let st = state.0;
    let s = match layout::operator(req, st).await {
        Ok(s) => s,
        Err(to_login) => return to_login,
    };
    let q: Query = req.params().unwrap_or_default();
    let today = Utc::now().date_naive();
    let date = |v: &Option<String>| {
        v.as_deref()
            .and_then(|v| NaiveDate::parse_from_str(v, "%Y-%m-%d").ok())
    };
    let to = date(&q.to).unwrap_or(today - Duration::days(1));
    let from = date(&q.from)
        .unwrap_or(to - Duration::days(29))
        .max(to - Duration::days(MAX_DAILY_DAYS - 1));
    let merchant = q
        .merchant
        .as_deref()
        .and_then(|m| Uuid::parse_str(m.trim()).ok());
    let currency = q
        .currency
        .as_deref()
        .map(str::trim)
        .filter(|c| c.len() == 3)
        .map(str::to_ascii_uppercase);
    let read = st.lagging().await;
    let mut sections: Vec<Markup> = Vec::new();
    if let Some(m) = merchant {
        let series = match liability::daily(&read.db, m, currency.as_deref(), from, to).await {
            Ok(s) => s,
            Err(e) => return error_page(&s, &e),
        };
        let mut currencies: Vec<String> = series
            .iter()
            .flat_map(|(_, lines)| lines.iter().map(|l| l.currency.clone()))
            .collect();
        currencies.sort();
        currencies.dedup();
        for cur in currencies {
            let days: Vec<(NaiveDate, Option<&Liability>)> = series
                .iter()
                .map(|(d, lines)| (*d, lines.iter().find(|l| l.currency == cur)))
                .collect();
            sections.push(html! {
                h2 { (cur) ": daily closing liability" }
                (chart(&days))
                table {
                    thead { tr {
                        th { "Date" }
                        @for c in ValueClass::ALL { th { (c.as_str()) } }
                        th { "Liability" } th { "Wallets" }
                    } }
                    tbody {
                        @for (d, l) in days.iter().rev() {
                            tr {
                                td { (d) }
                                @for c in ValueClass::ALL {
                                    td.num { (money(l.map_or(0, |l| l.class_minor(c)))) }
                                }
                                td.num { b { (money(l.map_or(0, |l| l.total_minor()))) } }
                                td.num { (l.map_or(0, |l| l.wallets_holding)) }
                            }
                        }
                    }
                }
            });
        }
        if sections.is_empty() {
            sections.push(html! { p.muted { "This merchant has held no customer value." } });
        }
        let runs = match reports::of_merchant(&read.db, m, 20).await {
            Ok(r) => r,
            Err(e) => return error_page(&s, &e),
        };
        sections.push(html! {
            h2 { "Report runs" }
            @if runs.is_empty() {
                p.muted { "No report was asked for on behalf of this merchant." }
            } @else {
                table {
                    thead { tr { th { "Asked" } th { "Type" } th { "Status" } th { "Rows" } th { "File" } } }
                    tbody {
                        @for r in &runs {
                            tr {
                                td { (layout::ts(r.created_at)) }
                                td { (r.kind) }
                                td { (r.status_str()) }
                                td.num { (r.row_count.map(|n| n.to_string()).unwrap_or_default()) }
                                td {
                                    @if r.succeeded() {
                                        a href={ "/ops/reports/" (r.id) "/file" } { (r.format) " (" (r.byte_size.unwrap_or(0)) " bytes)" }
                                    } @else if let Some(e) = &r.error { span.error { (e) } }
                                }
                            }
                        }
                    }
                }
            }
        });
    }
    let body = html! {
        form.filters method="get" action="/ops/liability" {
            label { "Merchant" input name="merchant" value=[q.merchant.as_deref()] placeholder="merchant id"; }
            label { "Currency" input name="currency" value=[currency.as_deref()] placeholder="all"; }
            label { "From" input type="date" name="from" value=(from); }
            label { "To" input type="date" name="to" value=(to); }
            button type="submit" { "Show" }
        }
        @if merchant.is_none() {
            p.muted { "Pick a merchant (its id is on the Tenants page). Days are UTC days; at most " (MAX_DAILY_DAYS) " at once." }
        }
        @for section in &sections { (section) }
    };
    layout::lagging_page(
        read.served,
        StatusCode::OK,
        "Liability",
        Some(&s),
        "liability",
        body,
    )
}

/// A report's file, for an operator to download.
#[handler]
pub async fn file(req: &Request, state: Data<&AppState>, Path(id): Path<String>) -> Response {
    let st = state.0;
    let s = match layout::operator(req, st).await {
        Ok(s) => s,
        Err(to_login) => return to_login,
    };
    let Some(id) = Uuid::parse_str(&id).ok() else {
        return layout::problem(StatusCode::NOT_FOUND, "No such report.");
    };
    let run = match reports::find_any(&st.db, id).await {
        Ok(Some(r)) if r.succeeded() => r,
        Ok(_) => return layout::problem(StatusCode::NOT_FOUND, "No such report file."),
        Err(e) => return error_page(&s, &e),
    };
    let pieces = reports::file_stream(st.db.clone(), id);
    let format = run.format();
    Response::builder()
        .status(StatusCode::OK)
        .content_type(format.content_type())
        .header(
            "Content-Disposition",
            format!(
                "attachment; filename=\"{}-{}.{}\"",
                run.kind,
                run.id,
                format.as_str()
            ),
        )
        .header("Cache-Control", "no-store")
        .body(Body::from_bytes_stream(pieces))
}
