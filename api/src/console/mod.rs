//! The operations console at `/ops`: server-rendered pages where the service's own staff
//! drain dead letters, watch webhook endpoints, act on tenants, clear risk blocks, read the
//! audit log and see the service's health. Behind the operator credential only (`session`); every
//! action is a form with a CSRF token and a required reason, and runs through the same
//! domain functions as the operator HTTP API and the CLI, which audit it.
//!
//! Lists are newest first and cursor-paginated (`?before=<id>`), each served by an index
//! (migration 000018 says which).
mod audit;
mod dead_letters;
mod health;
mod layout;
mod liability;
mod login;
mod risk;
mod session;
mod tenants;
mod webhooks;

use poem::{Response, Route, get, handler, post, web::Redirect};

pub use layout::{Fields, error_page, refuse_without_csrf, refused};
pub use session::{COOKIE, mint as mint_session, open as open_session};

/// Every console route below `/ops` with its methods, as `routes` mounts them: the suite
/// sends each of them malformed requests and expects a refusal, never a 5xx.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/console.css"),
    ("GET", "/login"),
    ("POST", "/login"),
    ("POST", "/logout"),
    ("GET", "/dead-letters"),
    ("POST", "/dead-letters/bulk"),
    ("GET", "/dead-letters/:id"),
    ("POST", "/dead-letters/:id/:action"),
    ("GET", "/webhooks"),
    ("POST", "/webhooks/:id/enable"),
    ("POST", "/webhooks/:id/recover"),
    ("GET", "/tenants"),
    ("POST", "/tenants/:id/:action"),
    ("GET", "/audit"),
    ("GET", "/health"),
    ("POST", "/health/ledger-check"),
    ("GET", "/liability"),
    ("GET", "/reports/:id/file"),
    ("GET", "/risk"),
    ("POST", "/risk/:id/clear"),
];

/// Every console route, to be nested at `/ops`.
pub fn routes() -> Route {
    Route::new()
        .at("/", get(home))
        .at("/console.css", get(css))
        .at("/login", get(login::form).post(login::submit))
        .at("/logout", post(login::logout))
        .at("/dead-letters", get(dead_letters::list))
        .at("/dead-letters/bulk", post(dead_letters::bulk))
        .at("/dead-letters/:id", get(dead_letters::show))
        .at("/dead-letters/:id/:action", post(dead_letters::act_one))
        .at("/webhooks", get(webhooks::list))
        .at("/webhooks/:id/enable", post(webhooks::enable))
        .at("/webhooks/:id/recover", post(webhooks::recover))
        .at("/tenants", get(tenants::list))
        .at("/tenants/:id/:action", post(tenants::set_status))
        .at("/audit", get(audit::list))
        .at("/health", get(health::page))
        .at("/health/ledger-check", post(health::ledger_check))
        .at("/liability", get(liability::page))
        .at("/reports/:id/file", get(liability::file))
        .at("/risk", get(risk::list))
        .at("/risk/:id/clear", post(risk::clear))
}

#[handler]
fn home() -> Redirect {
    Redirect::see_other("/ops/dead-letters")
}

#[handler]
fn css() -> Response {
    layout::stylesheet()
}

/// The signed-in operator, or (returned at once) the way to the login form. With a posted
/// form, also its CSRF token: a form without this session's is refused (403) and nothing
/// is done.
macro_rules! signed_in {
    ($req:expr, $st:expr) => {
        match $crate::console::session::Session::of($req, $st).await {
            Ok(s) => s,
            Err(why) => return $crate::console::refused(why),
        }
    };
    ($req:expr, $st:expr, form = $form:expr) => {{
        let s = $crate::console::signed_in!($req, $st);
        if let Some(r) = $crate::console::refuse_without_csrf($req, $st, &s, $form).await {
            return r;
        }
        s
    }};
}
pub(crate) use signed_in;
