//! `/ops/login` and `/ops/logout`: the operator key in, a session cookie out.
use super::{
    Fields, layout,
    session::{self, COOKIE, LOGIN_COOKIE, Session},
};
use crate::{
    domain::operators::{sessions, sign_in},
    error::ApiError,
    infra::{current_request::client_address, secret::constant_time_eq},
    state::AppState,
};
use maud::html;
use poem::{
    IntoResponse, Request, Response, handler,
    http::{StatusCode, header},
    web::{Data, Form, Query, Redirect},
};

/// How long a sign-in form (and its one-use token) lasts.
const LOGIN_FORM_TTL: std::time::Duration = std::time::Duration::from_secs(900);

fn login_page(req: &Request, st: &AppState, status: StatusCode, note: Option<&str>) -> Response {
    let nonce = session::new_login_nonce();
    let token = session::login_csrf(&st.sealer, &nonce);
    let body = html! {
        div.login {
            @if let Some(n) = note { p.error { (n) } }
            form method="post" action="/ops/login" {
                input type="hidden" name="csrf" value=(token);
                label { "Operator key"
                    input type="password" name="operator_key" autocomplete="off" required autofocus;
                }
                button type="submit" { "Sign in" }
            }
            p.muted { "Operator keys come from " code { "wallet-api operator create" } ". Partner keys do not open the console." }
        }
    };
    let mut r = layout::page(status, "Sign in", None, "", body);
    if let Ok(v) = header::HeaderValue::from_str(&session::set_cookie(
        req,
        LOGIN_COOKIE,
        &nonce,
        "/ops/login",
        LOGIN_FORM_TTL.as_secs() as i64,
    )) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[handler]
pub async fn form(req: &Request, state: Data<&AppState>, Query(q): Query<Fields>) -> Response {
    if Session::of(req, state.0).await.is_ok() {
        return Redirect::see_other("/ops/dead-letters").into_response();
    }
    let note = q
        .get("expired")
        .map(|_| "Your session expired. Sign in again.");
    login_page(req, state.0, StatusCode::OK, note)
}

/// The sign-in form's answer to a refused attempt: the form again (with a fresh token), or
/// while the client is past its failure budget, 429 with `Retry-After`.
fn refusal(req: &Request, st: &AppState, e: &ApiError, status: StatusCode, note: &str) -> Response {
    if let Some(secs) = e.retry_after() {
        let mut r = login_page(
            req,
            st,
            StatusCode::TOO_MANY_REQUESTS,
            Some("Too many failed sign-ins from here. Wait a few minutes and try again."),
        );
        if let Ok(v) = header::HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    if status.is_server_error() || e.status() >= 500 {
        tracing::error!(error = %e, "console sign-in failed");
        return layout::problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Signing in failed for a reason of ours. Try again in a moment.",
        );
    }
    login_page(req, st, status, Some(note))
}

#[handler]
pub async fn submit(req: &Request, state: Data<&AppState>, Form(f): Form<Fields>) -> Response {
    let st = state.0;
    let client = client_address(req.remote_addr());
    // The form's token is its nonce cookie's MAC, and good for one submission: a replayed
    // or stale form is refused (and counted like a wrong key) before any key is read.
    let nonce = session::cookie_value(req, LOGIN_COOKIE);
    let expected = nonce.map(|n| session::login_csrf(&st.sealer, n));
    let fresh = matches!((&expected, f.get("csrf")), (Some(e), Some(t)) if constant_time_eq(e.as_bytes(), t.as_bytes()));
    let first_use = match (fresh, nonce) {
        (true, Some(n)) => st
            .kv
            .set_nx_px(&format!("ops_login_used:{n}"), "1", LOGIN_FORM_TTL)
            .await
            .map_err(|e| refusal(req, st, &e, StatusCode::SERVICE_UNAVAILABLE, "")),
        _ => Ok(false),
    };
    match first_use {
        Err(r) => return r,
        Ok(false) => {
            let stale = "The sign-in form expired. Enter the key again.";
            let budget = sign_in::Budget::of(&st.config);
            return match sign_in::refused_form(&st.db, &st.kv, budget, &client).await {
                Ok(()) => login_page(req, st, StatusCode::FORBIDDEN, Some(stale)),
                Err(e) => refusal(req, st, &e, StatusCode::FORBIDDEN, stale),
            };
        }
        Ok(true) => {}
    }
    let Some(key) = f.get("operator_key") else {
        return login_page(
            req,
            st,
            StatusCode::BAD_REQUEST,
            Some("Enter an operator key."),
        );
    };
    let attempt = sign_in::Attempt {
        budget: sign_in::Budget::of(&st.config),
        key,
        client: &client,
        surface: "console",
    };
    let op = match sign_in::sign_in(&st.db, &st.kv, &attempt).await {
        Ok(op) => op,
        Err(e) => {
            return refusal(
                req,
                st,
                &e,
                StatusCode::UNAUTHORIZED,
                "That is not a valid operator key.",
            );
        }
    };
    let value = match session::open(st, &op, &client).await {
        Ok(v) => v,
        Err(e) => return refusal(req, st, &e, StatusCode::SERVICE_UNAVAILABLE, ""),
    };
    let ttl = i64::try_from(st.config.ops_session_secs).unwrap_or(1800);
    let mut r = Redirect::see_other("/ops/dead-letters").into_response();
    for c in [
        session::set_cookie(req, COOKIE, &value, "/ops", ttl),
        session::set_cookie(req, LOGIN_COOKIE, "", "/ops/login", 0),
    ] {
        if let Ok(v) = header::HeaderValue::from_str(&c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

/// Signs out: the session ends on the server, so the cookie is worthless even if kept.
#[handler]
pub async fn logout(req: &Request, state: Data<&AppState>, Form(f): Form<Fields>) -> Response {
    let s = super::signed_in!(req, state.0, form = &f);
    if let Err(e) = sessions::end(&state.0.db, &s.operator, s.id).await {
        tracing::error!(error = %e, "console sign-out failed");
        return layout::problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Signing out failed for a reason of ours; the session is still open. Try again.",
        );
    }
    let mut r = Redirect::see_other("/ops/login").into_response();
    if let Ok(v) = header::HeaderValue::from_str(&session::set_cookie(req, COOKIE, "", "/ops", 0)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}
