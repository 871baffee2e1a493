//! Checkout sessions: one interaction at a till. A session opens OPEN, becomes IDENTIFIED
//! when a customer is resolved in it (again as often as needed, e.g. to switch program),
//! and closes exactly once: COMPLETED by the wallet payment that carries its id,
//! CANCELLED by the terminal, or EXPIRED when it stays open past its deadline. A closed
//! session refuses every further call that names it.
use chrono::{DateTime, Duration, Utc};
use entities::{checkout_session, checkout_session::SessionResolution};
use sea_orm::ConnectionTrait;
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{
    credentials::scope::Acting,
    credentials::{Principal, scope},
    customers::{self, IdentityCredential, Resolution, ResolutionState},
};
use crate::{
    error::{ApiError, ErrorCode},
    infra::crypto::Sealer,
    store,
};

pub use entities::checkout_session::CheckoutState;
pub const OPEN: CheckoutState = CheckoutState::Open;
pub const IDENTIFIED: CheckoutState = CheckoutState::Identified;
pub const COMPLETED: CheckoutState = CheckoutState::Completed;
pub const CANCELLED: CheckoutState = CheckoutState::Cancelled;
pub const EXPIRED: CheckoutState = CheckoutState::Expired;

/// The state a reader sees: an open session past its deadline is EXPIRED even before the
/// sweep has written it.
pub fn effective_state(s: &checkout_session::Model, now: DateTime<Utc>) -> CheckoutState {
    match s.state {
        OPEN | IDENTIFIED if s.expires_at <= now => EXPIRED,
        other => other,
    }
}

/// A checkout session as a reader sees it at a moment: the domain's read model, so the HTTP
/// edge names no table. An open session past its deadline reads as EXPIRED, closed at its
/// deadline for `timeout`, even before the sweep has written it.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: Uuid,
    /// OPEN, IDENTIFIED, COMPLETED, CANCELLED or EXPIRED, as of the moment read.
    pub state: CheckoutState,
    pub merchant_id: Uuid,
    pub branch_id: Option<Uuid>,
    pub terminal_id: Option<String>,
    pub cashier_id: Option<String>,
    pub partner_session_id: Option<String>,
    /// The identified customer, once IDENTIFIED.
    pub wallet_user_id: Option<Uuid>,
    pub wallet_id: Option<Uuid>,
    pub wallet_program_id: Option<Uuid>,
    pub resolution_state: Option<SessionResolution>,
    /// The payment that completed the session.
    pub payment_id: Option<Uuid>,
    pub close_reason: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
}

impl Session {
    /// The session as read at `now`.
    fn at(s: checkout_session::Model, now: DateTime<Utc>) -> Self {
        let state = effective_state(&s, now);
        let timed_out = state == EXPIRED && s.closed_at.is_none();
        Session {
            id: s.id,
            state,
            merchant_id: s.merchant_id,
            branch_id: s.branch_id,
            terminal_id: s.terminal_id,
            cashier_id: s.cashier_id,
            partner_session_id: s.partner_session_id,
            wallet_user_id: s.wallet_user_id,
            wallet_id: s.wallet_id,
            wallet_program_id: s.wallet_program_id,
            resolution_state: s.resolution_state,
            payment_id: s.payment_id,
            close_reason: if timed_out {
                Some("timeout".into())
            } else {
                s.close_reason
            },
            expires_at: s.expires_at,
            created_at: s.created_at,
            closed_at: if timed_out {
                Some(s.expires_at)
            } else {
                s.closed_at
            },
        }
    }
}

fn is_open(s: &checkout_session::Model, now: DateTime<Utc>) -> bool {
    matches!(effective_state(s, now), OPEN | IDENTIFIED)
}

fn not_found() -> ApiError {
    ApiError::not_found("Checkout session")
}

fn closed_error(s: &checkout_session::Model, now: DateTime<Utc>) -> ApiError {
    let state = effective_state(s, now).to_string();
    ApiError::new(
        ErrorCode::ValidationError,
        format!("The checkout session is {state}; open a new one."),
    )
    .with_details(serde_json::json!({
        "session_state": state,
        "fields": [{
            "field": "/context/service_session_id",
            "issue": "session_closed",
            "message": format!("names a session that is {state}"),
        }],
    }))
}

/// A session named by a call must be this merchant's (else NOT_FOUND, as for another
/// tenant's) and in the caller's branch and terminal (else FORBIDDEN).
fn check_scope(s: &checkout_session::Model, acting: &Acting) -> Result<(), ApiError> {
    if s.merchant_id != acting.merchant_id {
        return Err(not_found());
    }
    let other_branch = s.branch_id.is_some() && s.branch_id != acting.branch_id;
    let other_terminal =
        matches!((&s.terminal_id, &acting.terminal_id), (Some(a), Some(b)) if a != b);
    if other_branch || other_terminal {
        return Err(ApiError::forbidden(
            "The checkout session belongs to another branch or terminal.",
        ));
    }
    Ok(())
}

pub struct Open {
    pub partner_session_id: Option<String>,
    pub basket: Option<Value>,
    pub ttl: Duration,
}

/// POST /checkout/sessions.
pub async fn open<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    acting: &Acting,
    req: Open,
    now: DateTime<Utc>,
) -> Result<Session, ApiError> {
    let brand_id = match acting.branch_id {
        Some(b) => store::tenancy::find_branch_of_enterprise(c, acting.merchant_id, b)
            .await?
            .map(|b| b.brand_id),
        None => principal.scope.brand_id(),
    };
    let s = checkout_session::Model {
        id: Uuid::now_v7(),
        merchant_id: acting.merchant_id,
        integration_id: acting.integration_id,
        brand_id,
        branch_id: acting.branch_id,
        terminal_id: acting.terminal_id.clone(),
        cashier_id: acting.cashier_id.clone(),
        partner_session_id: req.partner_session_id,
        state: OPEN,
        wallet_user_id: None,
        wallet_id: None,
        wallet_program_id: None,
        resolution_state: None,
        basket: req.basket,
        payment_id: None,
        close_reason: None,
        expires_at: now + req.ttl,
        created_at: now,
        updated_at: now,
        closed_at: None,
    };
    store::payments::checkout::insert(c, s.clone()).await?;
    Ok(Session::at(s, now))
}

/// A session the principal may see, or NOT_FOUND (another tenant's looks the same).
pub async fn find_visible<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    id: Uuid,
) -> Result<checkout_session::Model, ApiError> {
    let s = store::payments::checkout::find(c, principal.integration_id, id)
        .await?
        .ok_or_else(not_found)?;
    let other_brand = matches!((principal.scope.brand_id(), s.brand_id), (Some(mine), Some(theirs)) if mine != theirs);
    if other_brand {
        return Err(not_found());
    }
    match scope::authorize(c, principal, s.merchant_id, s.branch_id).await {
        Ok(acting) if s.branch_id.is_some() || acting.branch_id.is_none() => Ok(s),
        Ok(_) => Err(not_found()),
        Err(e) if e.code() == ErrorCode::Forbidden => Err(not_found()),
        Err(e) => Err(e),
    }
}

/// The session `id` as the principal reads it at `now` (NOT_FOUND as for `find_visible`).
pub async fn show<C: ConnectionTrait>(
    c: &C,
    principal: &Principal,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<Session, ApiError> {
    Ok(Session::at(find_visible(c, principal, id).await?, now))
}

/// The session locked for a call that names it: this caller's, and still open.
pub async fn hold<C: ConnectionTrait>(
    c: &C,
    acting: &Acting,
    id: Uuid,
    now: DateTime<Utc>,
) -> Result<checkout_session::Model, ApiError> {
    let s = hold_any_state(c, acting, id).await?;
    ensure_open(&s, now)?;
    Ok(s)
}

/// Locks the caller's session `id` whatever its state: for a payment, which checks its
/// credential before the session's state (`ensure_open`), so a replayed QR nonce is
/// CREDENTIAL_EXPIRED_OR_REPLAYED, telling the cashier to mint a new one, even when its
/// session has completed.
pub async fn hold_any_state<C: ConnectionTrait>(
    c: &C,
    acting: &Acting,
    id: Uuid,
) -> Result<checkout_session::Model, ApiError> {
    let s = store::payments::checkout::lock(c, acting.integration_id, id)
        .await?
        .ok_or_else(not_found)?;
    check_scope(&s, acting)?;
    Ok(s)
}

/// VALIDATION_ERROR `session_closed` unless the session is OPEN or IDENTIFIED.
pub fn ensure_open(s: &checkout_session::Model, now: DateTime<Utc>) -> Result<(), ApiError> {
    if is_open(s, now) {
        Ok(())
    } else {
        Err(closed_error(s, now))
    }
}

/// POST /checkout/sessions/{id}/identify: resolves the customer and attaches them. A
/// customer not found leaves the session as it was.
pub async fn identify<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    id: Uuid,
    customer: &IdentityCredential,
    program: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(Session, Resolution), ApiError> {
    let mut s = hold(c, acting, id, now).await?;
    customers::require_supported(c, acting.integration_id, customer).await?;
    let r = customers::resolve(c, sealer, s.merchant_id, customer, program, now).await?;
    if r.state != ResolutionState::NotFound {
        s.state = IDENTIFIED;
        s.wallet_user_id = r.identity.as_ref().map(|i| i.id);
        s.wallet_id = r.wallet.as_ref().map(|w| w.id);
        s.wallet_program_id = r.wallet.as_ref().map(|w| w.wallet_program_id);
        s.resolution_state = Some(r.state.stored());
        s.updated_at = now;
        store::payments::checkout::update(c, s.clone()).await?;
    }
    if let Some(event) =
        customers::identified_event(&r, acting, customer.type_name(), Some(s.id), now)
    {
        store::outbox::append(c, event).await?;
    }
    Ok((Session::at(s, now), r))
}

/// Closes an open session as CANCELLED. Cancelling a cancelled session changes nothing.
pub async fn cancel<C: ConnectionTrait>(
    c: &C,
    acting: &Acting,
    id: Uuid,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<Session, ApiError> {
    let s = store::payments::checkout::lock(c, acting.integration_id, id)
        .await?
        .ok_or_else(not_found)?;
    check_scope(&s, acting)?;
    if s.state == CANCELLED {
        return Ok(Session::at(s, now));
    }
    if !is_open(&s, now) {
        return Err(closed_error(&s, now));
    }
    let mut s = s;
    s.state = CANCELLED;
    s.close_reason = reason.or_else(|| Some("cancelled".into()));
    s.closed_at = Some(now);
    s.updated_at = now;
    store::payments::checkout::update(c, s.clone()).await?;
    Ok(Session::at(s, now))
}

/// The customer an IDENTIFIED session names; VALIDATION_ERROR on the session field while
/// no customer was identified in it.
pub fn identified_customer(s: &checkout_session::Model) -> Result<Uuid, ApiError> {
    match (s.state, s.wallet_user_id) {
        (IDENTIFIED, Some(u)) => Ok(u),
        _ => Err(ApiError::field(
            "/context/service_session_id",
            "session_not_identified",
            "names a session in which no customer was identified yet (POST /checkout/sessions/{id}/identify)",
        )),
    }
}

/// A payment (or mint, or top-up) in the session must be the identified customer's, when
/// one was identified; `field` names what named the other customer.
pub fn check_customer(
    s: &checkout_session::Model,
    wallet_user_id: Uuid,
    field: &str,
) -> Result<(), ApiError> {
    match s.wallet_user_id {
        Some(u) if u != wallet_user_id => Err(ApiError::field(
            field,
            "session_customer_mismatch",
            "belongs to another customer than the one identified in the checkout session",
        )),
        _ => Ok(()),
    }
}

/// The payment completed the session.
pub async fn complete<C: ConnectionTrait>(
    c: &C,
    mut s: checkout_session::Model,
    payment_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    s.state = COMPLETED;
    s.payment_id = Some(payment_id);
    s.close_reason = Some("paid".into());
    s.closed_at = Some(now);
    s.updated_at = now;
    store::payments::checkout::update(c, s).await?;
    Ok(())
}

/// Writes EXPIRED on open sessions past their deadline (readers already see them so).
pub async fn expire_due<C: ConnectionTrait>(
    c: &C,
    now: DateTime<Utc>,
    merchants: Option<&[Uuid]>,
) -> Result<u64, ApiError> {
    Ok(store::payments::checkout::expire_due(c, now, merchants).await?)
}
