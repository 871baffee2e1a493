//! Identification at the till: `POST /identify`, the cashier panel's
//! `GET /customers/lookup`, and the identity credential and CustomerContext shapes that
//! the checkout-session, enrollment and claim operations share.
use chrono::Utc;
use entities::{payment, promo_grant};
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi, Union,
    param::{Header, Query},
};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{
    auth::AnyAuth,
    balance::BalanceView,
    body::{Documented, JsonBody, Validate},
    common::{RequestContext, RequestMeta, caller, decision_trace, optional_uuid, ts},
    mutation,
    reply::Reply,
    tags::Tag,
};
use crate::domain::credentials::Permission;
use crate::{
    domain::{
        customers::{self, IDENTITY_CREDENTIAL_TYPES, IdentityCredential, Lookup, Resolution},
        payments::masked,
        validate::{self, Errors},
    },
    envelope,
    error::ApiError,
    infra::ratelimit,
    state::AppState,
};

// --- Identity credential ----------------------------------------------------------------

/// `credential_type` phone: the customer's phone number.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct PhoneIdentity {
    /// E.164 (spaces, dashes and a leading 00 are accepted and normalised).
    pub phone: String,
}

/// `credential_type` card_fingerprint: the fingerprint your acquirer gives a payment card,
/// linked to the customer when their enrollment was verified.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CardFingerprintIdentity {
    /// 8 to 128 printable ASCII characters.
    pub card_fingerprint: String,
}

/// `credential_type` short_code: the 5-character code of a live QR mint.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ShortCodeIdentity {
    pub short_code: String,
}

/// `credential_type` provider_customer_id: your POS's own customer id, linked at
/// enrollment verification.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ProviderCustomerIdentity {
    /// Up to 128 characters.
    pub provider_customer_id: String,
}

/// `credential_type` qr: the payload of a live QR mint (identification does not use it up).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct QrIdentity {
    pub qr_payload: String,
}

/// A customer named by one identity credential. The types an integration may use are
/// listed by `GET /capabilities` (`supported_identify_credential_types`); any other is
/// CREDENTIAL_TYPE_UNSUPPORTED with that list.
#[derive(Union, Debug, Clone)]
#[oai(discriminator_name = "credential_type", one_of = true)]
pub enum IdentityCredentialBody {
    #[oai(mapping = "phone")]
    Phone(PhoneIdentity),
    #[oai(mapping = "card_fingerprint")]
    CardFingerprint(CardFingerprintIdentity),
    #[oai(mapping = "short_code")]
    ShortCode(ShortCodeIdentity),
    #[oai(mapping = "provider_customer_id")]
    ProviderCustomerId(ProviderCustomerIdentity),
    #[oai(mapping = "qr")]
    Qr(QrIdentity),
}

/// An identity credential as sent: a known type with its value, or a type this version
/// does not know (answered CREDENTIAL_TYPE_UNSUPPORTED once the integration's list is read).
#[derive(Clone, Debug)]
pub enum Presented {
    Known(IdentityCredential),
    Unknown,
}

impl Presented {
    /// The credential, or CREDENTIAL_TYPE_UNSUPPORTED with the integration's enabled list.
    pub async fn known(
        self,
        state: &AppState,
        integration: Uuid,
    ) -> Result<IdentityCredential, ApiError> {
        match self {
            Presented::Known(c) => Ok(c),
            Presented::Unknown => Err(ApiError::credential_type_unsupported(
                &customers::supported_types(&state.db, integration).await?,
            )),
        }
    }

    /// `known`, counted against the integration's identification budget: every route that
    /// resolves a customer from an identifier (claims, offers, top-ups, ...) shares the
    /// identify limit, so none is a side door for enumerating phones or codes.
    pub async fn guarded(
        self,
        state: &AppState,
        principal: &crate::domain::credentials::Principal,
    ) -> Result<IdentityCredential, ApiError> {
        let credential = self.known(state, principal.integration_id).await?;
        identification_guard(state, principal, &credential).await?;
        Ok(credential)
    }
}

/// Checks the credential object at `at` (a JSON pointer) and returns what it names, or
/// `None` when a field error was pushed.
pub fn identity_credential(e: &mut Errors, at: &str, raw: &Value) -> Option<Presented> {
    if !raw.is_object() {
        e.push(
            at,
            "required",
            "is required: an object with a credential_type",
        );
        return None;
    }
    let Some(kind) = raw.get("credential_type").and_then(Value::as_str) else {
        e.push(format!("{at}/credential_type"), "required", "is required");
        return None;
    };
    if !IDENTITY_CREDENTIAL_TYPES.contains(&kind) {
        return Some(Presented::Unknown);
    }
    let field = match kind {
        "qr" => "qr_payload",
        other => other,
    };
    let pointer = if at.ends_with(':') {
        format!("{at}{field}")
    } else {
        format!("{at}/{field}")
    };
    let value = match raw.get(field) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | Some(Value::Null) | None => {
            e.push(
                pointer,
                "required",
                format!("is required for credential_type {kind}"),
            );
            return None;
        }
        Some(_) => {
            e.push(pointer, "invalid_type", "must be a string");
            return None;
        }
    };
    let parsed = match kind {
        "phone" => match validate::normalize_phone(&value) {
            Some(p) => IdentityCredential::Phone(p),
            None => {
                e.push(
                    pointer,
                    "invalid_phone",
                    "must be an E.164 phone number, e.g. +4915112345678",
                );
                return None;
            }
        },
        "card_fingerprint" => {
            if !(8..=128).contains(&value.len()) || !value.bytes().all(|b| b.is_ascii_graphic()) {
                e.push(
                    pointer,
                    "invalid_format",
                    "must be 8 to 128 printable ASCII characters without spaces",
                );
                return None;
            }
            IdentityCredential::CardFingerprint(value)
        }
        "short_code" => {
            if !(value.chars().count() == 5 && value.chars().all(|c| c.is_ascii_alphanumeric())) {
                e.push(pointer, "invalid_format", "must be 5 letters or digits");
                return None;
            }
            IdentityCredential::ShortCode(value.to_ascii_uppercase())
        }
        "provider_customer_id" => {
            if !validate::length(e, &pointer, &value, 1, 128)
                || !validate::no_control_chars(e, &pointer, &value)
            {
                return None;
            }
            IdentityCredential::ProviderCustomerId(value)
        }
        _ => {
            if value.len() > 200 || !value.starts_with("wq1.") {
                e.push(
                    pointer,
                    "invalid_format",
                    "is not a QR payload minted by this service",
                );
                return None;
            }
            IdentityCredential::Qr(value)
        }
    };
    Some(Presented::Known(parsed))
}

/// A customer named by `wallet_user_id`, an identity credential, or both (they must agree):
/// checked here, resolved in the transaction by `CustomerNamed::credentials`.
#[derive(Clone, Debug, Default)]
pub struct CustomerNamed {
    by_id: Option<Uuid>,
    by_credential: Option<Presented>,
}

impl CustomerNamed {
    pub fn parse(
        e: &mut Errors,
        wallet_user_id: &Option<String>,
        customer: Option<&Value>,
    ) -> CustomerNamed {
        let by_id = wallet_user_id
            .as_deref()
            .and_then(|id| crate::domain::validate::uuid(e, "/wallet_user_id", id));
        let by_credential = customer.and_then(|c| identity_credential(e, "/customer", c));
        if wallet_user_id.is_none() && customer.is_none() {
            e.push(
                "/wallet_user_id",
                "required",
                "give wallet_user_id or customer (or both, naming the same customer)",
            );
        }
        CustomerNamed {
            by_id,
            by_credential,
        }
    }

    /// What names the customer; an identity credential counts against the identify limit
    /// (`Presented::guarded`).
    pub async fn credentials(
        self,
        st: &AppState,
        principal: &crate::domain::credentials::Principal,
    ) -> Result<Vec<IdentityCredential>, ApiError> {
        let mut named = Vec::new();
        if let Some(id) = self.by_id {
            named.push(IdentityCredential::WalletUser(id));
        }
        if let Some(c) = self.by_credential {
            named.push(c.guarded(st, principal).await?);
        }
        Ok(named)
    }
}

/// The merchant a read without a body acts for: `merchant_id` when given (checked
/// against the credential), else the only merchant the credential acts for.
pub async fn merchant_of(
    st: &AppState,
    principal: &crate::domain::credentials::Principal,
    merchant_id: &Option<String>,
) -> Result<Uuid, ApiError> {
    let mut e = Errors::default();
    let given = optional_uuid(&mut e, "query:merchant_id", merchant_id);
    e.finish()?;
    let merchant = match given.or_else(|| principal.scope.enterprise_id()) {
        Some(m) => m,
        None => {
            let linked = crate::domain::platform::authorized_merchants(&st.db, principal).await?;
            match linked.as_slice() {
                [only] => *only,
                _ => {
                    return Err(ApiError::field(
                        "query:merchant_id",
                        "required",
                        "is required: the credential acts for several merchants",
                    ));
                }
            }
        }
    };
    crate::domain::credentials::scope::authorize(&st.db, principal, merchant, None).await?;
    Ok(merchant)
}

/// Identification is rate-limited per integration wherever it happens (identify, the
/// cashier lookup, session identify, and every route that takes a customer's identifier:
/// see `Presented::guarded`), and a short code is guarded as at payment: while the
/// integration has too many failed short codes, identification by short code is refused
/// too, so no route can be used to search for live codes or for phones.
pub async fn identification_guard(
    st: &AppState,
    principal: &crate::domain::credentials::Principal,
    credential: &IdentityCredential,
) -> Result<crate::error::RateLimitInfo, ApiError> {
    let rate = ratelimit::check(
        &st.kv,
        &st.config,
        &format!("identify:{}", principal.integration_id),
        principal.is_sandbox,
    )
    .await?;
    if matches!(credential, IdentityCredential::ShortCode(_)) {
        crate::domain::payments::short_code_guard(&st.kv, principal.integration_id).await?;
    }
    Ok(rate)
}

/// Counts a short code that named no live mint as a failed guess (as a payment would).
pub async fn identification_done(
    st: &AppState,
    integration: Uuid,
    credential: &IdentityCredential,
    found: bool,
) -> Result<(), ApiError> {
    if !found && matches!(credential, IdentityCredential::ShortCode(_)) {
        crate::domain::payments::short_code_failed(&st.kv, integration).await?;
    }
    Ok(())
}

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
    let state = r.state.as_str();
    crate::envelope::MetaExtra {
        data_completeness_score: Some(ctx.completeness()),
        decision_trace_id: Some(trace),
        capabilities: Some(serde_json::json!({
            "can_pay": state == "registered",
            "enrollment_required": state == "pending_proof",
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
    pub wallet_program_id: Option<String>,
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

fn recent_payment(p: &payment::Model) -> RecentPayment {
    RecentPayment {
        payment_id: p.id.to_string(),
        status: p.status.clone(),
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

pub fn grant_item(g: &promo_grant::Model) -> GrantItem {
    GrantItem {
        grant_id: g.id.to_string(),
        source: g.source.clone(),
        state: g.state.clone(),
        original_minor: g.original_minor,
        remaining_minor: g.remaining_minor,
        currency: g.currency.clone(),
        expires_at: ts(g.expires_at),
        created_at: ts(g.created_at),
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
        state: Data<&AppState>,
        auth: AnyAuth,
        /// Optional (UUID). Identification is read-only, so a retry simply resolves again.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: Header<Option<String>>,
        body: JsonBody<IdentifyRequest>,
    ) -> poem::Result<Reply<CustomerContext>> {
        auth.require(Permission::Terminal)?;
        let st = state.0;
        let principal = auth.principal();
        if idempotency_key.0.is_some() {
            crate::idempotency::parse_key(idempotency_key.0.as_deref())?;
        }
        let acting = mutation::authorize(st, principal, &body.value.context).await?;
        let b = &body.value;
        let mut e = Errors::default();
        let presented = identity_credential(&mut e, "/credential", &b.credential.raw);
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        e.finish()?;
        let credential = presented
            .ok_or_else(|| ApiError::internal("validated credential"))?
            .known(st, principal.integration_id)
            .await?;
        let rate = identification_guard(st, principal, &credential).await?;
        let trace = decision_trace(Some(&b.meta));
        let mut who = caller(principal, acting, &b.context);
        who.decision_trace_id = Some(trace.clone());
        let txn = crate::store::begin(&st.db).await.map_err(ApiError::from)?;
        let r =
            customers::identify(&txn, &st.sealer, &who, &credential, program, Utc::now()).await?;
        txn.commit().await.map_err(ApiError::from)?;
        identification_done(
            st,
            principal.integration_id,
            &credential,
            r.identity.is_some(),
        )
        .await?;
        let meta = identification_meta(&r, trace, &b.context);
        Ok(Reply::rendered(
            envelope::ok_with(&customer_context(&r), &meta).with_rate(rate),
        ))
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
    #[allow(clippy::too_many_arguments)]
    async fn lookup(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        merchant_id: Query<Option<String>>,
        branch_id: Query<Option<String>>,
        phone: Query<Option<String>>,
        provider_customer_id: Query<Option<String>>,
        card_fingerprint: Query<Option<String>>,
        short_code: Query<Option<String>>,
        qr_payload: Query<Option<String>>,
        wallet_user_id: Query<Option<String>>,
        wallet_program_id: Query<Option<String>>,
    ) -> poem::Result<Reply<CustomerLookup>> {
        auth.require(Permission::Terminal)?;
        let st = state.0;
        let principal = auth.principal();
        let mut e = Errors::default();
        let given: Vec<(&str, &String)> = [
            ("phone", &phone.0),
            ("provider_customer_id", &provider_customer_id.0),
            ("card_fingerprint", &card_fingerprint.0),
            ("short_code", &short_code.0),
            ("qr", &qr_payload.0),
            ("wallet_user_id", &wallet_user_id.0),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
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
        let merchant = optional_uuid(&mut e, "query:merchant_id", &merchant_id.0);
        let branch = optional_uuid(&mut e, "query:branch_id", &branch_id.0);
        let program = optional_uuid(&mut e, "query:wallet_program_id", &wallet_program_id.0);
        e.finish()?;
        let merchant = match merchant {
            Some(m) => m,
            None => merchant_of(st, principal, &None).await?,
        };
        let acting =
            crate::domain::credentials::scope::authorize(&st.db, principal, merchant, branch)
                .await?;
        let credential = credential
            .ok_or_else(|| ApiError::internal("validated credential"))?
            .known(st, principal.integration_id)
            .await?;
        let rate = identification_guard(st, principal, &credential).await?;
        let l = customers::lookup(
            &st.db,
            &st.sealer,
            principal.integration_id,
            acting.merchant_id,
            &credential,
            program,
            Utc::now(),
        )
        .await?;
        identification_done(
            st,
            principal.integration_id,
            &credential,
            l.resolution.identity.is_some(),
        )
        .await?;
        Ok(Reply::rendered(
            envelope::ok(&lookup_view(&l)).with_rate(rate),
        ))
    }
}
