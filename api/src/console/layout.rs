//! The page shell every console page shares: navigation, the operator and a sign-out
//! form, the stylesheet, and the headers that keep the pages private (no caching, no
//! framing, no script at all: every action is a plain form).
use crate::store::db::replica::Served;
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};
use poem::{
    Response,
    http::{HeaderValue, StatusCode, header},
};

use std::collections::HashMap;

use serde::Deserialize;

use super::session::Session;

const STYLESHEET: &str = include_str!("console.css");

pub const PAGES: &[(&str, &str)] = &[
    ("dead-letters", "Dead letters"),
    ("webhooks", "Webhook endpoints"),
    ("tenants", "Tenants"),
    ("audit", "Audit log"),
    ("health", "Health"),
    ("liability", "Liability"),
    ("risk", "Risk"),
];

pub fn stylesheet() -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .content_type("text/css; charset=utf-8")
        .header(header::CACHE_CONTROL, "max-age=3600")
        .body(STYLESHEET)
}

/// A whole page, sent with `status`.
pub fn page(
    status: StatusCode,
    title: &str,
    s: Option<&Session>,
    current: &str,
    body: Markup,
) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Wallet operations" }
                link rel="stylesheet" href="/ops/console.css";
            }
            body {
                header.top {
                    span.brand { "Wallet operations" }
                    @if let Some(s) = s {
                        nav {
                            @for (path, name) in PAGES {
                                a href={ "/ops/" (path) } class=[(current == *path).then_some("current")] { (name) }
                            }
                        }
                        form.signout method="post" action="/ops/logout" {
                            (csrf(s))
                            span.who { (s.operator.name) }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    html_response(status, doc.into_string())
}

/// A page of reads that tolerate lag, saying where they were served.
pub fn lagging_page(
    served: Served,
    status: StatusCode,
    title: &str,
    s: Option<&Session>,
    current: &str,
    body: Markup,
) -> Response {
    let body = html! {
        (body)
        p.served { "Read from the " (served.as_str()) " database, as of this page's request." }
    };
    page(status, title, s, current, body)
}

pub fn html_response(status: StatusCode, body: String) -> Response {
    let mut r = Response::builder()
        .status(status)
        .content_type("text/html; charset=utf-8")
        .body(body);
    let h = r.headers_mut();
    for (k, v) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    r
}

/// A page that only says what went wrong (no session needed to see it).
pub fn problem(status: StatusCode, message: &str) -> Response {
    page(
        status,
        status.canonical_reason().unwrap_or("Error"),
        None,
        "",
        html! { p.error { (message) } p { a href="/ops" { "Back to the console" } } },
    )
}

/// The hidden CSRF field every form carries.
pub fn csrf(s: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(s.csrf); }
}

/// A required reason field (kept in the audit log).
pub fn reason_field() -> Markup {
    html! {
        label { "Reason (kept in the audit log) "
            input type="text" name="reason" required minlength="1" maxlength="500" placeholder="ticket, incident or why";
        }
    }
}

pub fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// "3m ago", "2h ago", "5d ago".
pub fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - t).num_seconds().max(0);
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

/// A page of a list: a link to the next (older) page keeping the other parameters.
pub fn next_link(base: &str, params: &[(&str, Option<&str>)], before: Option<String>) -> Markup {
    let Some(before) = before else {
        return html! { p.muted { "End of the list." } };
    };
    let mut q: Vec<String> = params
        .iter()
        .filter_map(|(k, v)| {
            v.filter(|v| !v.is_empty())
                .map(|v| format!("{k}={}", enc(v)))
        })
        .collect();
    q.push(format!("before={before}"));
    html! { p { a.next href={ (base) "?" (q.join("&")) } { "Older →" } } }
}

/// Percent-encodes a query value.
pub fn enc(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Back to the login form (saying so when the session expired), never cached.
pub fn refused(why: super::session::Refusal) -> Response {
    use poem::IntoResponse;
    let to = match why {
        super::session::Refusal::Unavailable => {
            return problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "The database did not answer. Try again in a moment.",
            );
        }
        super::session::Refusal::Expired => "/ops/login?expired=1",
        super::session::Refusal::Missing | super::session::Refusal::Invalid => "/ops/login",
    };
    let mut r = poem::web::Redirect::see_other(to).into_response();
    r.headers_mut().insert(
        poem::http::header::CACHE_CONTROL,
        poem::http::HeaderValue::from_static("no-store"),
    );
    r
}

/// An error from a domain function, as a page: a refused input says why, anything else
/// is logged and shown without its cause.
pub fn error_page(s: &Session, e: &crate::error::ApiError) -> Response {
    let body = e.to_body();
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status.is_server_error() {
        tracing::error!(error = %e, "console action failed");
    }
    let message = body["message"].as_str().unwrap_or("Failed").to_string();
    let fields: Vec<String> = e
        .field_errors()
        .iter()
        .map(|f| format!("{}: {}", f.field, f.message))
        .collect();
    page(
        status,
        "That did not work",
        Some(s),
        "",
        maud::html! {
            p.error { (message) }
            @for f in &fields { p.error { (f) } }
            p { "Nothing was changed. Use the browser's Back button to correct the form, or "
                a href="/ops" { "return to the console" } "." }
        },
    )
}

/// The signed-in operator, or (as the error) the way to the login form: what `signed_in!`
/// does, for a page that needs no form.
pub async fn operator(
    req: &poem::Request,
    st: &crate::state::AppState,
) -> Result<Session, Response> {
    Session::of(req, st).await.map_err(refused)
}

/// A form's or query string's fields, as text; blank ones count as absent.
#[derive(Deserialize, Default, Debug)]
#[serde(transparent)]
pub struct Fields(HashMap<String, String>);

impl Fields {
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    pub fn owned(&self, k: &str) -> Option<String> {
        self.get(k).map(str::to_string)
    }
}

/// A form posted without this session's CSRF token is refused, and nothing is done but an
/// audit entry: a forged cross-site post reaching a signed-in operator is worth knowing of.
pub async fn refuse_without_csrf(
    req: &poem::Request,
    st: &crate::state::AppState,
    s: &Session,
    f: &Fields,
) -> Option<Response> {
    if s.csrf_ok(f.get("csrf")) {
        return None;
    }
    let client = crate::infra::current_request::client_address(req.remote_addr());
    if let Err(e) = crate::domain::operators::audit(
        &st.db,
        &s.operator.actor(),
        "console.csrf_refused",
        "operator",
        Some(s.operator.id.to_string()),
        None,
        serde_json::json!({"path": req.original_uri().path(), "client": client}),
    )
    .await
    {
        tracing::error!(error = %e, "console: auditing a refused form failed");
    }
    Some(problem(
        StatusCode::FORBIDDEN,
        "This form is missing its security token or it belongs to an older session. \
         Reload the page and try again; nothing was changed.",
    ))
}

/// The signed-in operator of a posted form, or (as the error) the refusal: the way to the
/// login form, or 403 for a form without this session's CSRF token. What
/// `signed_in!(req, st, form = f)` does, for a module that keeps to `layout`.
pub async fn operator_form(
    req: &poem::Request,
    st: &crate::state::AppState,
    f: &Fields,
) -> Result<Session, Response> {
    let s = operator(req, st).await?;
    match refuse_without_csrf(req, st, &s, f).await {
        Some(refusal) => Err(refusal),
        None => Ok(s),
    }
}
