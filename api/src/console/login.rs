//! `/ops/login` and `/ops/logout`: the operator key in, a session cookie out.
use chrono::Utc;
use maud::html;
use poem::{
    IntoResponse, Request, Response, handler,
    http::{StatusCode, header},
    web::{Data, Form, Query, Redirect},
};
use serde_json::json;

use super::{
    Fields, layout,
    session::{self, COOKIE, LOGIN_COOKIE, Session},
};
use crate::{domain::operators, infra::secret::constant_time_eq, state::AppState};

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
        900,
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

#[handler]
pub async fn submit(req: &Request, state: Data<&AppState>, Form(f): Form<Fields>) -> Response {
    let st = state.0;
    let expected = session::cookie_value(req, LOGIN_COOKIE)
        .map(|nonce| session::login_csrf(&st.sealer, nonce));
    let fresh = matches!((&expected, f.get("csrf")), (Some(e), Some(t)) if constant_time_eq(e.as_bytes(), t.as_bytes()));
    if !fresh {
        return login_page(
            req,
            st,
            StatusCode::FORBIDDEN,
            Some("The sign-in form expired. Enter the key again."),
        );
    }
    let Some(key) = f.get("operator_key") else {
        return login_page(
            req,
            st,
            StatusCode::BAD_REQUEST,
            Some("Enter an operator key."),
        );
    };
    let op = match operators::authenticate(&st.db, key).await {
        Ok(op) => op,
        Err(e) if e.status() == 401 => {
            return login_page(
                req,
                st,
                StatusCode::UNAUTHORIZED,
                Some("That is not a valid operator key."),
            );
        }
        Err(e) => {
            tracing::error!(error = %e, "console sign-in failed");
            return layout::problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "Signing in failed for a reason of ours. Try again in a moment.",
            );
        }
    };
    let ttl = i64::try_from(st.config.ops_session_secs).unwrap_or(1800);
    let value = session::mint(
        &st.sealer,
        op.id,
        Utc::now() + chrono::Duration::seconds(ttl),
    );
    if let Err(e) = operators::audit(
        &st.db,
        &op.actor(),
        "console.sign_in",
        "operator",
        Some(op.id.to_string()),
        None,
        json!({}),
    )
    .await
    {
        tracing::error!(error = %e, "console sign-in could not be audited");
        return layout::problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Signing in failed for a reason of ours. Try again in a moment.",
        );
    }
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

#[handler]
pub async fn logout(req: &Request, state: Data<&AppState>, Form(f): Form<Fields>) -> Response {
    let _session = super::signed_in!(req, state.0, form = &f);
    let mut r = Redirect::see_other("/ops/login").into_response();
    if let Ok(v) = header::HeaderValue::from_str(&session::set_cookie(req, COOKIE, "", "/ops", 0)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}
