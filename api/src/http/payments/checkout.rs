//! Checkout sessions: open, read, identify the customer in one, cancel one.
use crate::http::pipeline::fields::Text;
use crate::http::pipeline::fields::UuidText;
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::http::{
    customers::{
        CustomerContext, IdentityCredentialBody, customer_context, identification_meta,
        identity_credential,
    },
    openapi::tags::Tag,
    payments::Basket,
    pipeline::auth::TerminalJwtAuth,
    pipeline::body::{Documented, JsonBody, Validate},
    pipeline::common::{
        RequestContext, RequestMeta, decision_trace, in_context, optional_uuid, path_uuid, ts,
    },
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        payments::checkout::{self, Open, Session},
        validate::Errors,
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

/// A checkout session.
#[derive(Object, Serialize)]
pub struct CheckoutSession {
    pub session_id: String,
    /// OPEN, IDENTIFIED, COMPLETED (a payment ran in it), CANCELLED or EXPIRED.
    pub state: String,
    pub merchant_id: String,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    #[oai(nullable)]
    pub terminal_id: Option<String>,
    #[oai(nullable)]
    pub cashier_id: Option<String>,
    #[oai(nullable)]
    pub partner_session_id: Option<String>,
    /// The identified customer, once IDENTIFIED.
    #[oai(nullable)]
    pub wallet_user_id: Option<String>,
    #[oai(nullable)]
    pub wallet_id: Option<String>,
    #[oai(nullable)]
    pub wallet_program_id: Option<String>,
    /// `registered` or `pending_proof` once a customer was identified.
    #[oai(nullable)]
    pub resolution_state: Option<String>,
    /// The payment that completed the session.
    #[oai(nullable)]
    pub payment_id: Option<String>,
    #[oai(nullable)]
    pub close_reason: Option<String>,
    pub expires_at: String,
    pub created_at: String,
    #[oai(nullable)]
    pub closed_at: Option<String>,
}

fn view(s: &Session) -> CheckoutSession {
    CheckoutSession {
        session_id: s.id.to_string(),
        merchant_id: s.merchant_id.to_string(),
        branch_id: s.branch_id.map(|b| b.to_string()),
        terminal_id: s.terminal_id.clone(),
        cashier_id: s.cashier_id.clone(),
        partner_session_id: s.partner_session_id.clone(),
        wallet_user_id: s.wallet_user_id.map(|u| u.to_string()),
        wallet_id: s.wallet_id.map(|u| u.to_string()),
        wallet_program_id: s.wallet_program_id.map(|u| u.to_string()),
        resolution_state: s.resolution_state.map(|r| r.as_str().to_string()),
        payment_id: s.payment_id.map(|u| u.to_string()),
        close_reason: s.close_reason.clone(),
        expires_at: ts(s.expires_at),
        created_at: ts(s.created_at),
        closed_at: s.closed_at.map(ts),
        state: s.state.to_string(),
    }
}

/// Open a checkout session.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OpenSessionRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The basket so far (optional; kept with the session for reconciliation).
    #[oai(nullable)]
    pub basket: Option<Basket>,
}

impl Validate for OpenSessionRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if let Some(b) = &self.basket {
            b.check(e);
        }
    }
}

/// Identify the customer in a session.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct SessionIdentifyRequest {
    /// Optional here: omitted, nothing is checked; given, it must be valid.
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    #[serde(default)]
    pub customer: Documented<IdentityCredentialBody>,
    /// Picks the program when the customer has wallets in several.
    #[oai(nullable)]
    pub wallet_program_id: Option<crate::http::pipeline::fields::UuidText>,
}

impl Validate for SessionIdentifyRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        identity_credential(e, "/customer", &self.customer.raw);
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
    }
}

/// The identity resolution result (CustomerContext), with the session after it.
#[derive(Object, Serialize)]
pub struct SessionIdentifyResult {
    #[oai(flatten)]
    #[serde(flatten)]
    pub customer: CustomerContext,
    pub session: CheckoutSession,
}

/// Cancel a session.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CancelSessionRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Up to 200 characters.
    #[oai(nullable)]
    pub reason: Option<Text<1, 200>>,
}

impl Validate for CancelSessionRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if let Some(r) = &self.reason {
            r.check(e, "/reason");
        }
    }
}

pub struct CheckoutApi;

#[OpenApi(tag = "Tag::CheckoutSession")]
impl CheckoutApi {
    /// Open a checkout session
    ///
    /// One interaction at the till, state OPEN. Identity and basket attach to it; a wallet
    /// payment that carries its id in `context.service_session_id` completes it
    /// (COMPLETED). It can be cancelled, and it expires (EXPIRED) when no payment
    /// completes it within its lifetime (`expires_at`, 30 minutes by default). A closed
    /// session refuses every call that names it.
    #[oai(
        path = "/checkout/sessions",
        method = "post",
        operation_id = "openCheckoutSession"
    )]
    async fn open(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<OpenSessionRequest>,
    ) -> poem::Result<Reply<CheckoutSession>> {
        let p = &auth.0;
        let b = &body.value;
        let ttl = chrono::Duration::seconds(state.0.config.checkout_session_ttl_secs as i64);
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async move |txn, acting| {
            let now = clock.now();
            let who = in_context(acting, &b.context);
            let s = checkout::open(
                txn,
                p,
                &who,
                Open {
                    partner_session_id: b.context.partner_session_id.clone().map(String::from),
                    basket: b
                        .basket
                        .as_ref()
                        .map(|bk| serde_json::to_value(&bk.lines).unwrap_or_default()),
                    ttl,
                },
                now,
            )
            .await?;
            Ok(Outcome::new(view(&s)))
        })
        .await
    }

    /// Read a checkout session
    ///
    /// Another tenant's session, or one outside the caller's branch, is NOT_FOUND.
    #[oai(
        path = "/checkout/sessions/:id",
        method = "get",
        operation_id = "getCheckoutSession"
    )]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        id: Path<UuidText>,
    ) -> poem::Result<Reply<CheckoutSession>> {
        let id = path_uuid("path:id", &id.0)?;
        let clock = auth.0.clock();
        let s = checkout::show(&state.0.db, &auth.0, id, clock.now()).await?;
        Ok(Reply::ok(&view(&s)))
    }

    /// Identify the customer in a checkout session
    ///
    /// The session must be OPEN or IDENTIFIED; it becomes IDENTIFIED when the customer is
    /// resolved (`registered` or `pending_proof`), and stays as it was on `not_found`.
    /// Identifying again replaces the customer (e.g. to pick another program with
    /// `wallet_program_id`). Emits customer.identified for a known wallet.
    #[oai(
        path = "/checkout/sessions/:id/identify",
        method = "post",
        operation_id = "identifyCheckoutSession"
    )]
    async fn identify(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<SessionIdentifyRequest>,
    ) -> poem::Result<Reply<SessionIdentifyResult>> {
        let id = path_uuid("path:id", &id.0)?;
        let st = state.0.clone();
        let p = &auth.0;
        let b = &body.value;
        let mut e = Errors::default();
        let presented = identity_credential(&mut e, "/customer", &b.customer.raw);
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        e.finish()?;
        let customer = presented
            .ok_or_else(|| ApiError::internal("validated customer"))?
            .known(&st, p.integration_id)
            .await?;
        let clock = auth.0.clock();
        // Whether the customer was found, and where: set by the work, so a replay counts
        // nothing.
        let found = std::sync::OnceLock::new();
        let found_by_work = &found;
        let customer_named = &customer;
        let guard_state = st.clone();
        let reply = key
            .run_prepared(
                &auth.0,
                &body,
                async move |acting| {
                    guard_state
                        .guard()
                        .before_identifying(p, acting, customer_named)
                        .await
                        .map(|_| ())
                },
                async move |txn, acting, ()| {
                    let now = clock.now();
                    let trace = decision_trace(b.meta.as_ref());
                    let mut who = in_context(acting, &b.context);
                    who.decision_trace_id = Some(trace.clone());
                    let (s, r) =
                        checkout::identify(txn, &st.sealer, &who, id, customer_named, program, now)
                            .await?;
                    let _ = found_by_work.set((who.clone(), r.identity.is_some()));
                    let mut out = Outcome::new(SessionIdentifyResult {
                        session: view(&s),
                        customer: customer_context(&r),
                    });
                    out.meta = identification_meta(&r, trace, &b.context);
                    Ok(out)
                },
            )
            .await;
        if let Some((who, found)) = found.get() {
            // After the transaction ended: the identification stands whatever this says.
            let counted = state
                .0
                .guard()
                .after_identifying(who, &customer, *found)
                .await;
            if let Err(e) = counted {
                tracing::warn!(error = %e, "could not count a failed short-code guess");
            }
        }
        reply
    }

    /// Cancel a checkout session
    ///
    /// Closes an OPEN or IDENTIFIED session as CANCELLED; cancelling a cancelled session
    /// changes nothing. A completed or expired session cannot be cancelled
    /// (VALIDATION_ERROR with `details.session_state`).
    #[oai(
        path = "/checkout/sessions/:id/cancel",
        method = "post",
        operation_id = "cancelCheckoutSession"
    )]
    async fn cancel(
        &self,
        auth: TerminalJwtAuth,
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<CancelSessionRequest>,
    ) -> poem::Result<Reply<CheckoutSession>> {
        let id = path_uuid("path:id", &id.0)?;
        let b = &body.value;
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async move |txn, acting| {
            let now = clock.now();
            let who = in_context(acting, &b.context);
            let s =
                checkout::cancel(txn, &who, id, b.reason.clone().map(String::from), now).await?;
            Ok(Outcome::new(view(&s)))
        })
        .await
    }
}
