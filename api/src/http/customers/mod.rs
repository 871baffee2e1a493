//! Identification at the till: `POST /identify`, the cashier panel's
//! `GET /customers/lookup`, and the identity credential and CustomerContext shapes that
//! the checkout-session, enrollment and claim operations share.
pub mod balance;
pub mod enrollment;
mod identity;

pub use identity::*;

use crate::http::pipeline::fields::{CardFingerprint, Phone, QrPayload, ShortCode, Text, UuidText};
use crate::http::pipeline::query_group::{Grouped, query_group};
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;

use crate::domain::credentials::Permission;
use crate::http::{
    customers::balance::BalanceView,
    openapi::tags::Tag,
    pipeline::auth::AnyAuth,
    pipeline::body::{Documented, JsonBody, Validate},
    pipeline::common::{
        RequestContext, RequestMeta, decision_trace, in_context, optional_uuid, ts,
    },
    pipeline::mutation::OptionalKey,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        customers::{self, IdentityCredential, Lookup, Resolution},
        payments::masked,
        validate::{self, Errors},
    },
    envelope,
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

// --- CustomerContext ---------------------------------------------------------------------

/// Who the customer is, as far as the till needs to know. Read-only: it never carries a
/// token or anything else that authorizes a debit.
#[derive(Object, serde::Serialize)]
pub struct CustomerContext {
    /// `registered`, `pending_proof` or `not_found` (still HTTP 200).
    pub resolution_state: String,
    #[oai(nullable)]
    pub wallet_user_id: Option<String>,
    #[oai(nullable)]
    pub wallet_program_id: Option<String>,
    #[oai(nullable)]
    pub wallet_id: Option<String>,
    /// Correlates this identification with the calls that follow it.
    pub identity_trace_id: String,
    /// What the till may show: the phone with all but its last three digits hidden.
    #[oai(nullable)]
    pub display_name: Option<String>,
    /// `NEW` (verified, no payment yet), `MEMBER`, `PENDING_PROOF` or `EXPIRED`.
    #[oai(nullable)]
    pub badge: Option<String>,
    /// Null when `resolution_state` is `not_found`.
    #[oai(nullable)]
    pub balance: Option<BalanceView>,
}

/// The response meta of an identification: its decision trace id, the context's
/// completeness, and what the till can do next (`can_pay`, `enrollment_required`).
pub fn identification_meta(
    r: &Resolution,
    trace: String,
    ctx: &RequestContext,
) -> crate::envelope::MetaExtra {
    use crate::domain::customers::ResolutionState;
    crate::envelope::MetaExtra {
        data_completeness_score: Some(ctx.completeness()),
        decision_trace_id: Some(trace),
        capabilities: Some(serde_json::json!({
            "can_pay": r.state == ResolutionState::Registered,
            "enrollment_required": r.state == ResolutionState::PendingProof,
        })),
    }
}

pub fn customer_context(r: &Resolution) -> CustomerContext {
    CustomerContext {
        resolution_state: r.state.as_str().into(),
        wallet_user_id: r.wallet.as_ref().map(|w| w.wallet_user_id.to_string()),
        wallet_program_id: r.wallet.as_ref().map(|w| w.wallet_program_id.to_string()),
        wallet_id: r.wallet.as_ref().map(|w| w.id.to_string()),
        identity_trace_id: r.trace_id.to_string(),
        display_name: r
            .wallet
            .as_ref()
            .and(r.identity.as_ref())
            .map(|i| masked(&i.phone)),
        badge: r.wallet.as_ref().and(r.badge.clone()),
        balance: r.balance.clone().map(Into::into),
    }
}

// --- POST /identify ----------------------------------------------------------------------

/// Identify a customer.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct IdentifyRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    #[serde(default)]
    pub credential: Documented<IdentityCredentialBody>,
    /// Picks the program when the customer has wallets in several.
    #[oai(nullable)]
    pub wallet_program_id: Option<crate::http::pipeline::fields::UuidText>,
}

impl Validate for IdentifyRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        identity_credential(e, "/credential", &self.credential.raw);
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
    }
}

// --- GET /customers/lookup -------------------------------------------------------------

/// A payment in the cashier panel.
#[derive(Object, serde::Serialize)]
pub struct RecentPayment {
    pub payment_id: String,
    pub status: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
    pub currency: String,
    #[oai(nullable)]
    pub order_ref: Option<String>,
    pub created_at: String,
}

fn recent_payment(p: &crate::domain::payments::Payment) -> RecentPayment {
    RecentPayment {
        payment_id: p.id.to_string(),
        status: p.status.as_str().to_string(),
        amount_minor: p.amount_minor,
        refunded_minor: p.refunded_minor,
        currency: p.currency.clone(),
        order_ref: p.order_ref.clone(),
        created_at: ts(p.created_at),
    }
}

/// One money movement of the wallet: a payment, refund, void, top-up, adjustment, grant
/// accrual or expiry, escrow hold or release.
#[derive(Object, serde::Serialize)]
pub struct ActivityItem {
    pub posting_id: String,
    pub kind: String,
    pub reference_type: String,
    pub reference_id: String,
    /// Change of actual money (signed).
    pub actual_delta_minor: i64,
    /// Change of promotional credit (signed).
    pub promo_delta_minor: i64,
    pub at: String,
}

/// A promotional grant in any state.
#[derive(Object, serde::Serialize)]
pub struct GrantItem {
    pub grant_id: String,
    pub source: String,
    /// LOCKED, RELEASED, CONSUMED, EXPIRED or CLAWED_BACK.
    pub state: String,
    pub original_minor: i64,
    pub remaining_minor: i64,
    pub currency: String,
    pub expires_at: String,
    pub created_at: String,
}

pub fn grant_item(g: &crate::domain::incentives::grants::Grant) -> GrantItem {
    GrantItem {
        grant_id: g.id.to_string(),
        source: g.source.clone(),
        state: g.state.as_str().to_string(),
        original_minor: g.original_minor,
        remaining_minor: g.remaining_minor,
        currency: g.currency.clone(),
        expires_at: ts(g.expires_at),
        created_at: ts(g.created_at),
    }
}

query_group! {
    /// Whom the cashier panel looks up: one credential, for which merchant and program.
    pub struct LookupQuery {
        merchant_id: Option<UuidText> = "merchant_id",
        branch_id: Option<UuidText> = "branch_id",
        phone: Option<Phone> = "phone",
        provider_customer_id: Option<Text<1, 128>> = "provider_customer_id",
        card_fingerprint: Option<CardFingerprint> = "card_fingerprint",
        short_code: Option<ShortCode> = "short_code",
        qr_payload: Option<QrPayload> = "qr_payload",
        wallet_user_id: Option<UuidText> = "wallet_user_id",
        wallet_program_id: Option<UuidText> = "wallet_program_id",
    }
}

/// The cashier panel's view of a customer.
#[derive(Object, serde::Serialize)]
pub struct CustomerLookup {
    pub customer: CustomerContext,
    /// VERIFIED, PENDING_PROOF or EXPIRED (a lapsed enrollment); null when not found.
    #[oai(nullable)]
    pub identity_state: Option<String>,
    /// Actual money the merchant holds for the customer since their enrollment lapsed; it
    /// returns to the wallet when they enroll and verify again.
    pub escrowed_actual_minor: i64,
    /// The latest 10 payments, newest first.
    pub recent_payments: Vec<RecentPayment>,
    /// The latest 20 money movements, newest first.
    pub recent_activity: Vec<ActivityItem>,
    /// The latest 20 grants in any state, newest first.
    pub grants: Vec<GrantItem>,
}

fn lookup_view(l: &Lookup) -> CustomerLookup {
    let mut customer = customer_context(&l.resolution);
    if l.resolution.wallet.is_none()
        && let Some(i) = &l.resolution.identity
    {
        customer.wallet_user_id = Some(i.id.to_string());
        customer.display_name = Some(masked(&i.phone));
        customer.badge = l.resolution.badge.clone();
    }
    CustomerLookup {
        customer,
        identity_state: l.identity_state.clone(),
        escrowed_actual_minor: l.escrowed_actual_minor,
        recent_payments: l.recent_payments.iter().map(recent_payment).collect(),
        recent_activity: l
            .recent_activity
            .iter()
            .map(|a| ActivityItem {
                posting_id: a.posting_id.to_string(),
                kind: a.kind.clone(),
                reference_type: a.reference_type.clone(),
                reference_id: a.reference_id.to_string(),
                actual_delta_minor: a.actual_delta_minor,
                promo_delta_minor: a.promo_delta_minor,
                at: ts(a.created_at),
            })
            .collect(),
        grants: l.grants.iter().map(grant_item).collect(),
    }
}

pub struct CustomersApi;

#[OpenApi(tag = "Tag::Customers")]
impl CustomersApi {
    /// Identify a customer
    ///
    /// Resolves an identity credential to the customer's wallet and balance. Read-only: no
    /// money, grant, credential or session changes, and nothing in the answer authorizes a
    /// debit. An unknown customer is `resolution_state: not_found` with HTTP 200. A known
    /// wallet emits customer.identified. Rate-limited per integration (429 with Retry-After
    /// and X-RateLimit-*). The declared scheme is the x-api-key; a terminal JWT (Bearer) is
    /// accepted as well. The Idempotency-Key header is optional: the call is safe to retry.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(path = "/identify", method = "post", operation_id = "identifyCustomer")]
    async fn identify(
        &self,
        auth: AnyAuth,
        /// Optional (UUID). With it, a retry replays the first answer (and its
        /// customer.identified event is emitted once); without it, a retry resolves again.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<IdentifyRequest>,
    ) -> poem::Result<Reply<CustomerContext>> {
        auth.require(Permission::Terminal)?;
        let st = key.state();
        let principal = auth.principal();
        let b = &body.value;
        let mut e = Errors::default();
        let presented = identity_credential(&mut e, "/credential", &b.credential.raw);
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        e.finish()?;
        let trace = decision_trace(Some(&b.meta));
        // Set when this request resolved (never for a replay, which is no new guess).
        let mut found = None;
        let found_slot = &mut found;
        let mut rate = None;
        let rate_slot = &mut rate;
        let reply = key
            .run_prepared(
                principal,
                &body,
                async |acting| {
                    let credential = presented
                        .ok_or_else(|| ApiError::internal("validated credential"))?
                        .known(st, principal.integration_id)
                        .await?;
                    *rate_slot = Some(
                        st.guard()
                            .before_identifying(principal, acting, &credential)
                            .await?,
                    );
                    Ok(credential)
                },
                async move |txn, acting, credential| {
                    let mut who = in_context(acting, &b.context);
                    who.decision_trace_id = Some(trace.clone());
                    let r =
                        customers::identify(txn, &st.sealer, &who, &credential, program, who.now())
                            .await?;
                    *found_slot = Some((who.clone(), credential, r.identity.is_some()));
                    let meta = identification_meta(&r, trace, &b.context);
                    let mut outcome = Outcome::new(customer_context(&r));
                    outcome.meta = meta;
                    Ok(outcome)
                },
            )
            .await?;
        if let Some((who, credential, known)) = found {
            st.guard()
                .after_identifying(&who, &credential, known)
                .await?;
        }
        Ok(match rate {
            Some(rate) => reply.with_rate(rate),
            None => reply,
        })
    }

    /// Look up a customer (cashier panel)
    ///
    /// Identity, balance, badge, the latest payments, money movements and grants, for the
    /// cashier's screen. Name the customer with exactly one of `phone`,
    /// `provider_customer_id`, `card_fingerprint`, `short_code`, `qr_payload` or
    /// `wallet_user_id`. `merchant_id` is required unless the credential acts for exactly
    /// one merchant. Read-only; an unknown customer is `resolution_state: not_found` with
    /// HTTP 200. A customer whose enrollment lapsed shows `identity_state: EXPIRED` with
    /// what the merchant holds in escrow for them.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(
        path = "/customers/lookup",
        method = "get",
        operation_id = "lookupCustomer"
    )]
    async fn lookup(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        query: Grouped<LookupQuery>,
    ) -> poem::Result<Reply<CustomerLookup>> {
        auth.require(Permission::Terminal)?;
        let st = state.0;
        let principal = auth.principal();
        let q = query.0;
        let mut e = Errors::default();
        let given: Vec<(&str, &str)> = [
            ("phone", q.phone.as_deref()),
            ("provider_customer_id", q.provider_customer_id.as_deref()),
            ("card_fingerprint", q.card_fingerprint.as_deref()),
            ("short_code", q.short_code.as_deref()),
            ("qr", q.qr_payload.as_deref()),
            ("wallet_user_id", q.wallet_user_id.as_deref()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        let credential = match given.as_slice() {
            [("wallet_user_id", v)] => validate::uuid(&mut e, "query:wallet_user_id", v)
                .map(|id| Presented::Known(IdentityCredential::WalletUser(id))),
            [(kind, v)] => {
                let field = if *kind == "qr" { "qr_payload" } else { kind };
                let raw = serde_json::json!({"credential_type": kind, field: v});
                identity_credential(&mut e, "query:", &raw)
            }
            _ => {
                e.push(
                    "query:phone",
                    "exactly_one",
                    "give exactly one of phone, provider_customer_id, card_fingerprint, short_code, qr_payload or wallet_user_id",
                );
                None
            }
        };
        let merchant = optional_uuid(&mut e, "query:merchant_id", &q.merchant_id);
        let branch = optional_uuid(&mut e, "query:branch_id", &q.branch_id);
        let program = optional_uuid(&mut e, "query:wallet_program_id", &q.wallet_program_id);
        e.finish()?;
        let merchant = match merchant {
            Some(m) => m,
            None => merchant_of(st, principal, &None::<String>).await?,
        };
        let acting =
            crate::domain::credentials::scope::authorize(&st.db, principal, merchant, branch)
                .await?;
        let credential = credential
            .ok_or_else(|| ApiError::internal("validated credential"))?
            .known(st, principal.integration_id)
            .await?;
        let rate = st
            .guard()
            .before_identifying(principal, &acting, &credential)
            .await?;
        let clock = principal.clock();
        let l = customers::lookup(
            &st.db,
            &st.sealer,
            principal.integration_id,
            acting.merchant_id,
            &credential,
            program,
            clock.now(),
        )
        .await?;
        st.guard()
            .after_identifying(&acting, &credential, l.resolution.identity.is_some())
            .await?;
        Ok(Reply::rendered(
            envelope::ok(&lookup_view(&l)).with_rate(rate),
        ))
    }
}
