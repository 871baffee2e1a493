//! The first layer of a mutating request: it parses the Idempotency-Key header, once, into
//! the request's extensions (`idempotency::Presented`), and answers retries before the
//! operation runs: a mutating request under an API key whose
//! Idempotency-Key already has a stored response gets that response here, ahead of body
//! parsing, validation and the operation's own steps, none of which a replay needs.
//!
//! The key check this needs is the one the operation would make (the cached principal,
//! fetched together with the response copy in one Redis round trip), and its principal is
//! handed on, so a request that is not a replay pays for nothing twice. Whatever this layer
//! cannot answer with certainty (no copy, another body, a key the cache does not vouch
//! for, a terminal JWT) goes on to the operation, whose idempotency step decides it.
use poem::{
    Endpoint, IntoResponse, Middleware, Request, Response,
    http::{Method, header},
};

use std::sync::Arc;

use crate::http::{pipeline::auth::KeyPrincipal, pipeline::body, pipeline::reply::Reply};
use crate::{
    idempotency::{self, Fetched, Presented},
    state::AppState,
};

/// The header's name, as requests are read.
const HEADER: &str = "idempotency-key";

pub struct EarlyReplay;

impl<E: Endpoint> Middleware<E> for EarlyReplay {
    type Output = EarlyReplayEp<E>;
    fn transform(&self, ep: E) -> Self::Output {
        EarlyReplayEp { inner: ep }
    }
}

pub struct EarlyReplayEp<E> {
    inner: E,
}

impl<E: Endpoint> Endpoint for EarlyReplayEp<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        if let Some(replayed) = answer(&mut req).await {
            return Ok(replayed);
        }
        self.inner.call(req).await.map(IntoResponse::into_response)
    }
}

/// The request's Idempotency-Key, parsed once for every layer after this one.
pub fn presented(req: &Request) -> Arc<Presented> {
    match req.extensions().get::<Arc<Presented>>() {
        Some(p) => p.clone(),
        None => Presented::parse(first_value(req)),
    }
}

fn first_value(req: &Request) -> Option<&str> {
    req.headers()
        .get_all(HEADER)
        .iter()
        .find_map(|v| v.to_str().ok())
}

/// The stored response, or `None` with the API key's principal left in the request's
/// extensions when the cache vouched for it. Either way a mutating request leaves here with
/// its Idempotency-Key parsed into the extensions.
async fn answer(req: &mut Request) -> Option<Response> {
    if !matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        return None;
    }
    let presented = Presented::parse(first_value(req));
    req.extensions_mut().insert(presented.clone());
    if req.headers().contains_key(header::AUTHORIZATION) {
        // A terminal JWT is the credential operations try first: this layer would answer
        // for the API key instead.
        return None;
    }
    let key = presented.well_formed()?;
    // The body was buffered whole by the outer layers: taking it cannot fail, and it is put
    // back as it was.
    let bytes = req.take_body().into_bytes().await.ok()?;
    req.set_body(bytes.clone());
    let headers = req.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let raw_key = text("x-api-key")?;
    if !text(header::CONTENT_TYPE.as_str()).is_some_and(body::is_json) {
        return None;
    }
    let state = req.data::<AppState>()?;
    let (principal, copy) = state
        .key_auth()
        .cached_principal(raw_key, Some(key))
        .await?;
    let operation = idempotency::operation(req.method().as_str(), req.original_uri().path());
    let fetched = Fetched {
        request_digest: Some(idempotency::request_digest(
            &principal.scope_fingerprint(),
            &operation,
            &bytes,
        )),
        credential_fingerprint: Some(copy.credential_fingerprint),
        copy: copy.copy,
    };
    let replayed = idempotency::replay_early(
        &state.idempotency(),
        &principal,
        &fetched,
        key,
        &operation,
        || {
            // The same reading as the full path: a body it refuses is never a replay.
            crate::http::pipeline::strict_json::parse(&bytes)
                .ok()
                .filter(serde_json::Value::is_object)
        },
    );
    match replayed {
        Some(rendered) => Some(Reply::<()>::rendered(rendered).into_response()),
        None => {
            presented.remember(fetched);
            req.extensions_mut().insert(KeyPrincipal(principal));
            None
        }
    }
}
