//! Payments: OTP send, QR mint, the payment itself, and reading, voiding and refunding it.
//! Handlers parse, check scope and hand over to `domain::payments`; the idempotent
//! transaction and the error envelope come from `mutation`.
use chrono::Utc;
use entities::{payment, payment_refund};
use poem::web::Data;
use poem_openapi::{Object, OpenApi, Union, param::Path};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{
    auth::{AnyAuth, TerminalJwtAuth},
    balance::BalanceView,
    body::{Documented, JsonBody, Validate},
    common::{
        RequestContext, RequestMeta, caller, decision_trace, optional_uuid, path_uuid, phone, ts,
    },
    mutation::{self, Idempotent},
    reply::Reply,
    tags::Tag,
};
use crate::domain::credentials::Permission;
use crate::{
    domain::{
        credentials::Principal,
        customers::IdentityCredential,
        payments::{self, Credential, Customer, ReversalKind},
        validate::{self, Errors},
    },
    envelope::MetaExtra,
    error::{ApiError, ErrorCode},
    idempotency::Outcome,
    state::AppState,
};

pub struct PaymentsApi;

pub use crate::domain::validate::MAX_AMOUNT_MINOR;

pub(super) fn amount(e: &mut Errors, field: &str, v: i64) {
    if validate::min_amount(e, field, v, 1) && v > MAX_AMOUNT_MINOR {
        e.push(
            field,
            "too_large",
            format!("must be at most {MAX_AMOUNT_MINOR}"),
        );
    }
}

// --- OTP send ---------------------------------------------------------------------------

/// Send a payment OTP to the customer's phone.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OtpSendRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// E.164; resolves the wallet.
    #[serde(default)]
    pub phone: String,
    /// The later payment must be for exactly this amount. Minimum 1.
    #[serde(default)]
    pub amount_minor: i64,
    /// ISO-4217.
    #[serde(default)]
    pub currency: String,
    /// The anti-replay boundary: the payment's `order_ref` (or its
    /// `context.partner_session_id`) must equal it.
    #[serde(default)]
    pub order_ref: String,
    /// Picks the program when the customer has wallets in several.
    #[oai(nullable)]
    pub wallet_program_id: Option<String>,
}

impl Validate for OtpSendRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        phone(e, "/phone", &self.phone);
        amount(e, "/amount_minor", self.amount_minor);
        validate::currency(e, "/currency", &self.currency);
        if validate::length(e, "/order_ref", &self.order_ref, 1, 128) {
            validate::no_control_chars(e, "/order_ref", &self.order_ref);
        }
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
    }
}

/// An OTP session: pass its id with the code in the payment's `otp` credential.
#[derive(Object, Serialize)]
pub struct OtpSendResult {
    pub otp_session_id: String,
    /// The phone the code went to, all but the last three digits hidden.
    pub phone_masked: String,
    pub amount_minor: i64,
    pub currency: String,
    pub order_ref: String,
    pub wallet_program_id: String,
    pub expires_at: String,
    /// Further sends allowed for this order in the current 5-minute window.
    pub sends_remaining: i64,
}

// --- QR mint ----------------------------------------------------------------------------

/// Names the customer by an identity credential.
#[derive(Object, Deserialize, Debug, Clone, Default)]
pub struct CustomerCredential {
    /// `phone` (the only type this version resolves for a mint).
    #[serde(default)]
    pub credential_type: String,
    /// E.164, for `credential_type` phone.
    #[oai(nullable)]
    pub phone: Option<String>,
}

/// Mint a single-use QR nonce (and optionally a short code) for a customer's wallet. The
/// customer is the one a cashier identified in the checkout session that
/// `context.service_session_id` names; the wallet app (no session) names the customer
/// with `customer` or `wallet_user_id` instead.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct QrMintRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The customer, by identity credential, when no identified checkout session names
    /// them. At most one of `customer` and `wallet_user_id`.
    #[oai(nullable)]
    pub customer: Option<CustomerCredential>,
    /// The customer, by wallet identity id (from identification), when no identified
    /// checkout session names them.
    #[oai(nullable)]
    pub wallet_user_id: Option<String>,
    /// Also return a 5-character alphanumeric code the customer can read out. Default
    /// false.
    #[serde(default)]
    #[oai(default)]
    pub include_short_code: bool,
    /// Picks the program when the customer has wallets in several (default: the program
    /// the session's identification chose).
    #[oai(nullable)]
    pub wallet_program_id: Option<String>,
}

impl QrMintRequest {
    /// The customer the body names, if any; `None` leaves it to the checkout session.
    fn customer(&self, e: &mut Errors) -> Option<Customer> {
        match (&self.customer, &self.wallet_user_id) {
            (Some(_), Some(_)) => {
                e.push(
                    "/customer",
                    "at_most_one",
                    "give at most one of customer or wallet_user_id",
                );
                None
            }
            (None, None) => {
                if self.context.service_session_id.is_none() {
                    e.push(
                        "/context/service_session_id",
                        "required",
                        "name the checkout session the customer was identified in, or the customer (customer or wallet_user_id)",
                    );
                }
                None
            }
            (None, Some(id)) => validate::uuid(e, "/wallet_user_id", id).map(Customer::WalletUser),
            (Some(c), None) => {
                if c.credential_type != "phone" {
                    e.push(
                        "/customer/credential_type",
                        "invalid_value",
                        "must be phone",
                    );
                    return None;
                }
                phone(e, "/customer/phone", c.phone.as_deref().unwrap_or_default())
                    .map(Customer::Phone)
            }
        }
    }
}

impl Validate for QrMintRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.customer(e);
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
    }
}

/// A QR nonce: render `qr_payload` as a QR code. Single use, valid 5 minutes; a new mint
/// for the same wallet replaces it.
#[derive(Object, Serialize)]
pub struct QrMintResult {
    pub qr_payload: String,
    /// 5 characters, present when requested.
    #[oai(nullable)]
    pub short_code: Option<String>,
    pub wallet_program_id: String,
    pub expires_at: String,
    pub expires_in: i64,
}

// --- Payment ----------------------------------------------------------------------------

/// A one-time code the customer received by SMS.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OtpCredential {
    /// E.164.
    pub phone: String,
    /// The 6 digits from the SMS.
    pub otp_code: String,
    /// From `POST /payments/otp/send`.
    pub otp_session_id: String,
}

/// A rotating single-use QR nonce from `POST /qr/mint`.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct QrCredential {
    /// The scanned QR content, as minted.
    pub qr_payload: String,
}

/// The 5-character code of a QR mint, read out by the customer.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ShortCodeCredential {
    pub short_code: String,
}

/// The payment credential, by `type`: a dynamic credential, one that proves the customer
/// is at the till now. New types are added to this union without a new route;
/// `GET /capabilities` lists the enabled ones (`supported_payment_credential_types`).
///
/// A static identifier of the customer (`phone`, `card_fingerprint`,
/// `provider_customer_id`, `wallet_user_id`: anyone who knows it could present it) is
/// refused with 422 REQUIRES_DYNAMIC_CREDENTIAL, `details.accepted` listing the dynamic
/// types: collect an OTP, QR or short code and retry. `pass_tap`, in the contract's union,
/// is not enabled in this version (no passes are issued), so it is not listed here and
/// answers 422 CREDENTIAL_TYPE_UNSUPPORTED with `details.supported`, as does any other
/// unknown type.
#[derive(Union, Debug, Clone)]
#[oai(discriminator_name = "type", one_of = true)]
pub enum PaymentCredential {
    #[oai(mapping = "otp")]
    Otp(OtpCredential),
    #[oai(mapping = "qr")]
    Qr(QrCredential),
    #[oai(mapping = "short_code")]
    ShortCode(ShortCodeCredential),
}

/// One basket line. Line totals are captured for reconciliation; they never change the debit.
#[derive(Object, Deserialize, Serialize, Debug, Clone)]
pub struct BasketLine {
    pub sku: String,
    pub quantity: f64,
    pub unit_price_minor: i64,
    pub extended_price_minor: i64,
    #[oai(nullable)]
    pub category: Option<String>,
    #[oai(nullable)]
    pub discount_minor: Option<i64>,
}

#[derive(Object, Deserialize, Debug, Clone, Default)]
pub struct Basket {
    #[serde(default)]
    pub lines: Vec<BasketLine>,
}

/// Debit a wallet.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct PaymentRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    #[serde(default)]
    pub credential: Documented<PaymentCredential>,
    /// The debit, exactly. Minimum 1.
    #[serde(default)]
    pub amount_minor: i64,
    /// ISO-4217.
    #[serde(default)]
    pub currency: String,
    /// Your order or receipt reference; defaults to `context.partner_session_id`.
    #[oai(nullable)]
    pub order_ref: Option<String>,
    /// When given, must be the program of the wallet the credential belongs to.
    #[oai(nullable)]
    pub wallet_program_id: Option<String>,
    /// Optional; raises `meta.data_completeness_score`.
    #[oai(nullable)]
    pub basket: Option<Basket>,
}

impl PaymentRequest {
    fn effective_order_ref(&self) -> Option<String> {
        self.order_ref
            .clone()
            .or_else(|| self.context.partner_session_id.clone())
    }

    fn credential(&self) -> Result<Credential, ApiError> {
        parse_credential(&self.credential.raw)
    }
}

/// A payment credential, once `validate_credential` passed. A static identifier is
/// REQUIRES_DYNAMIC_CREDENTIAL; an unknown or disabled type CREDENTIAL_TYPE_UNSUPPORTED.
pub(super) fn parse_credential(raw: &Value) -> Result<Credential, ApiError> {
    let kind = raw.get("type").and_then(Value::as_str).unwrap_or_default();
    let field = |k: &str| {
        raw.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match kind {
        "otp" => Ok(Credential::Otp {
            phone: validate::normalize_phone(&field("phone")).unwrap_or_default(),
            otp_code: field("otp_code"),
            otp_session_id: Uuid::parse_str(&field("otp_session_id")).unwrap_or_default(),
        }),
        "qr" => Ok(Credential::Qr {
            qr_payload: field("qr_payload"),
        }),
        "short_code" => Ok(Credential::ShortCode {
            short_code: field("short_code").to_ascii_uppercase(),
        }),
        _ => {
            let enabled: Vec<String> = payments::ENABLED_CREDENTIALS
                .iter()
                .map(|s| s.to_string())
                .collect();
            Err(if payments::STATIC_IDENTIFIERS.contains(&kind) {
                ApiError::requires_dynamic_credential(kind, &enabled)
            } else {
                ApiError::credential_type_unsupported(&enabled)
            })
        }
    }
}

/// Field errors of a payment credential. `to_pay` false (the balance check): an OTP
/// credential needs only its session, as its code is not verified there.
pub(super) fn validate_credential(e: &mut Errors, raw: &Value, to_pay: bool) {
    if !raw.is_object() {
        e.push(
            "/credential",
            "required",
            "is required: an object with a type",
        );
        return;
    }
    let Some(kind) = raw.get("type").and_then(Value::as_str) else {
        e.push("/credential/type", "required", "is required");
        return;
    };
    let text = |e: &mut Errors, k: &str| -> Option<String> {
        match raw.get(k) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            None | Some(Value::Null) if !to_pay && ["phone", "otp_code"].contains(&k) => None,
            Some(Value::String(_)) | None | Some(Value::Null) => {
                e.push(format!("/credential/{k}"), "required", "is required");
                None
            }
            Some(_) => {
                e.push(
                    format!("/credential/{k}"),
                    "invalid_type",
                    "must be a string",
                );
                None
            }
        }
    };
    match kind {
        "otp" => {
            if let Some(p) = text(e, "phone") {
                phone(e, "/credential/phone", &p);
            }
            if let Some(code) = text(e, "otp_code")
                && !(code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit()))
            {
                e.push(
                    "/credential/otp_code",
                    "invalid_format",
                    "must be exactly 6 digits",
                );
            }
            if let Some(id) = text(e, "otp_session_id") {
                validate::uuid(e, "/credential/otp_session_id", &id);
            }
        }
        "qr" => {
            if let Some(p) = text(e, "qr_payload")
                && (p.len() > 200 || !p.starts_with("wq1."))
            {
                e.push(
                    "/credential/qr_payload",
                    "invalid_format",
                    "is not a QR payload minted by this service",
                );
            }
        }
        "short_code" => {
            if let Some(c) = text(e, "short_code")
                && !(c.chars().count() == 5 && c.chars().all(|ch| ch.is_ascii_alphanumeric()))
            {
                e.push(
                    "/credential/short_code",
                    "invalid_format",
                    "must be 5 letters or digits",
                );
            }
        }
        // Unknown and disabled types are answered by `credential()` after validation.
        _ => {}
    }
}

impl Validate for PaymentRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        validate_credential(e, &self.credential.raw, true);
        amount(e, "/amount_minor", self.amount_minor);
        validate::currency(e, "/currency", &self.currency);
        if let Some(o) = &self.order_ref
            && validate::length(e, "/order_ref", o, 1, 128)
        {
            validate::no_control_chars(e, "/order_ref", o);
        }
        let is_otp = self.credential.raw.get("type").and_then(Value::as_str) == Some("otp");
        if is_otp && self.effective_order_ref().is_none() {
            e.push(
                "/order_ref",
                "required",
                "is required for an otp credential (or context.partner_session_id)",
            );
        }
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
        if let Some(b) = &self.basket {
            if b.lines.len() > 500 {
                e.push("/basket/lines", "too_many", "at most 500 lines");
            }
            for (i, l) in b.lines.iter().enumerate() {
                let f = |k: &str| format!("/basket/lines/{i}/{k}");
                validate::length(e, &f("sku"), &l.sku, 1, 64);
                if !(l.quantity.is_finite() && l.quantity > 0.0) {
                    e.push(f("quantity"), "out_of_range", "must be a number above 0");
                }
                for (k, v) in [
                    ("unit_price_minor", Some(l.unit_price_minor)),
                    ("extended_price_minor", Some(l.extended_price_minor)),
                    ("discount_minor", l.discount_minor),
                ] {
                    if let Some(v) = v
                        && !(0..=MAX_AMOUNT_MINOR).contains(&v)
                    {
                        e.push(
                            f(k),
                            "out_of_range",
                            format!("must be between 0 and {MAX_AMOUNT_MINOR}"),
                        );
                    }
                }
                if let Some(c) = &l.category {
                    validate::length(e, &f("category"), c, 1, 64);
                }
            }
        }
    }
}

/// The result of a successful payment.
#[derive(Object, Serialize)]
pub struct PaymentResult {
    pub payment_id: String,
    /// `completed` (the debit landed). `pending` is reserved and never returned now.
    pub status: String,
    pub wallet_id: String,
    pub amount_minor: i64,
    /// Promotional part of the debit (spent first).
    pub debited_promo_minor: i64,
    /// Actual-money part of the debit.
    pub debited_actual_minor: i64,
    pub currency: String,
    #[oai(nullable)]
    pub order_ref: Option<String>,
    pub balance_after: BalanceView,
    pub completed_at: String,
    /// True when the basket disagrees with `amount_minor`: flagged, never adjusted.
    pub needs_reconciliation: bool,
    /// The checkout session the payment completed, when it named one.
    #[oai(nullable)]
    pub service_session_id: Option<String>,
    /// The CASHBACK grant the payment earned under its program's cashback rule (accrued in
    /// the payment's transaction, RELEASED at once); null when it earned none.
    #[oai(nullable)]
    pub cashback: Option<super::customers::GrantItem>,
}

/// A refund or void of a payment.
#[derive(Object, Serialize)]
pub struct RefundView {
    pub refund_id: String,
    /// `refund` or `void`.
    pub kind: String,
    pub amount_minor: i64,
    /// Back to the wallet's actual money.
    pub returned_actual_minor: i64,
    /// Back to promotional grants that can still hold it.
    pub returned_promo_minor: i64,
    /// Promotional parts whose grant has expired or was clawed back: not revived.
    pub forfeited_promo_minor: i64,
    #[oai(nullable)]
    pub reason: Option<String>,
    pub created_at: String,
}

pub(super) fn refund_view(r: &payment_refund::Model) -> RefundView {
    RefundView {
        refund_id: r.id.to_string(),
        kind: r.kind.clone(),
        amount_minor: r.amount_minor,
        returned_actual_minor: r.to_actual_minor,
        returned_promo_minor: r.amount_minor - r.to_actual_minor - r.forfeited_promo_minor,
        forfeited_promo_minor: r.forfeited_promo_minor,
        reason: r.reason.clone(),
        created_at: ts(r.created_at),
    }
}

/// A payment as stored, with its refunds.
#[derive(Object, Serialize)]
pub struct PaymentDetail {
    pub payment_id: String,
    /// `completed` or `voided`.
    pub status: String,
    pub wallet_id: String,
    pub credential_type: String,
    pub amount_minor: i64,
    pub debited_promo_minor: i64,
    pub debited_actual_minor: i64,
    pub refunded_minor: i64,
    pub refundable_minor: i64,
    pub currency: String,
    #[oai(nullable)]
    pub order_ref: Option<String>,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    #[oai(nullable)]
    pub terminal_id: Option<String>,
    #[oai(nullable)]
    pub cashier_id: Option<String>,
    /// The basket's total when one was sent.
    #[oai(nullable)]
    pub basket_total_minor: Option<i64>,
    pub needs_reconciliation: bool,
    pub data_completeness_score: i32,
    /// The checkout session the payment completed, when it named one.
    #[oai(nullable)]
    pub service_session_id: Option<String>,
    pub created_at: String,
    pub completed_at: String,
    #[oai(nullable)]
    pub voided_at: Option<String>,
    pub refunds: Vec<RefundView>,
}

pub(super) fn detail(p: &payment::Model, refunds: &[payment_refund::Model]) -> PaymentDetail {
    PaymentDetail {
        payment_id: p.id.to_string(),
        status: p.status.clone(),
        wallet_id: p.wallet_id.to_string(),
        credential_type: p.credential_type.clone(),
        amount_minor: p.amount_minor,
        debited_promo_minor: p.debited_promo_minor,
        debited_actual_minor: p.debited_actual_minor,
        refunded_minor: p.refunded_minor,
        refundable_minor: if p.status == "voided" {
            0
        } else {
            p.amount_minor - p.refunded_minor
        },
        currency: p.currency.clone(),
        order_ref: p.order_ref.clone(),
        branch_id: p.branch_id.map(|b| b.to_string()),
        terminal_id: p.terminal_id.clone(),
        cashier_id: p.cashier_id.clone(),
        basket_total_minor: p.basket_total_minor,
        needs_reconciliation: p.needs_reconciliation,
        data_completeness_score: p.data_completeness_score,
        service_session_id: p.service_session_id.map(|s| s.to_string()),
        created_at: ts(p.created_at),
        completed_at: ts(p.completed_at),
        voided_at: p.voided_at.map(ts),
        refunds: refunds.iter().map(refund_view).collect(),
    }
}

/// Void a payment: reverse it in full.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct VoidRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Up to 200 characters.
    #[oai(nullable)]
    pub reason: Option<String>,
}

fn reason(e: &mut Errors, r: &Option<String>) {
    if let Some(r) = r
        && validate::length(e, "/reason", r, 1, 200)
    {
        validate::no_control_chars(e, "/reason", r);
    }
}

impl Validate for VoidRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        reason(e, &self.reason);
    }
}

/// Refund all or part of a payment.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct RefundRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// How much to return; default: everything not yet refunded.
    #[oai(nullable)]
    pub amount_minor: Option<i64>,
    /// When given, must be the payment's currency.
    #[oai(nullable)]
    pub currency: Option<String>,
    /// Up to 200 characters.
    #[oai(nullable)]
    pub reason: Option<String>,
}

impl Validate for RefundRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if let Some(a) = self.amount_minor {
            amount(e, "/amount_minor", a);
        }
        if let Some(c) = &self.currency {
            validate::currency(e, "/currency", c);
        }
        reason(e, &self.reason);
    }
}

/// A void or refund: the payment after it, what went back where, and the wallet's balance.
#[derive(Object, Serialize)]
pub struct ReversalResult {
    pub payment: PaymentDetail,
    /// Null when a void found the payment already voided (nothing changed).
    #[oai(nullable)]
    pub refund: Option<RefundView>,
    pub balance_after: BalanceView,
    /// What this reversal took back of the payment's cashback: the same share as the share
    /// of the payment returned (all of it on a void or the last refund).
    pub cashback_reversed_minor: i64,
    /// The same for an offer reward redeemed against the payment.
    pub offer_reward_reversed_minor: i64,
    /// Reward credit due back that the customer had already spent; never taken from actual
    /// money (taken later if the spent credit comes back to its grant).
    pub rewards_unrecovered_minor: i64,
}

/// Capture request (reserved).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CaptureRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
}

impl Validate for CaptureRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
    }
}

fn is_failed_credential(e: &poem::Error) -> bool {
    e.downcast_ref::<ApiError>()
        .is_some_and(|a| a.code() == ErrorCode::CredentialExpiredOrReplayed)
}

#[OpenApi(tag = "Tag::Payments")]
impl PaymentsApi {
    /// Send a payment OTP
    ///
    /// Resolves the wallet from the phone, mints an OTP session bound to the order, amount
    /// and currency, and texts a 6-digit code. No money moves. At most 3 sends per order
    /// within 5 minutes (then 429 RATE_LIMITED with Retry-After).
    #[oai(
        path = "/payments/otp/send",
        method = "post",
        operation_id = "sendPaymentOtp"
    )]
    async fn otp_send(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<OtpSendRequest>,
    ) -> poem::Result<Reply<OtpSendResult>> {
        let st = state.0.clone();
        let principal = auth.0.clone();
        let b = body.value.clone();
        let mut e = Errors::default();
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        let req = payments::OtpSend {
            phone: validate::normalize_phone(&b.phone).unwrap_or_default(),
            amount_minor: b.amount_minor,
            currency: b.currency.clone(),
            order_ref: b.order_ref.clone(),
            wallet_program_id: program,
            max_sends_per_wallet: st.config.otp_sends_per_wallet,
        };
        key.run(&auth.0, &body, async move |txn, acting| {
            // The phone resolves a wallet: it counts as an identification.
            let phone = IdentityCredential::Phone(req.phone.clone());
            super::customers::identification_guard(&st, &principal, &phone).await?;
            let who = caller(&principal, acting, &b.context);
            let sent = payments::send_otp(txn, &st.sealer, &who, req, Utc::now()).await?;
            Ok(Outcome::new(OtpSendResult {
                otp_session_id: sent.session.id.to_string(),
                phone_masked: payments::masked(&sent.phone),
                amount_minor: sent.session.amount_minor,
                currency: sent.session.currency,
                order_ref: sent.session.order_ref,
                wallet_program_id: sent.wallet.wallet_program_id.to_string(),
                expires_at: ts(sent.session.expires_at),
                sends_remaining: sent.sends_remaining as i64,
            }))
        })
        .await
    }

    /// Mint a QR nonce
    ///
    /// A single-use nonce bound to the customer's wallet, valid 5 minutes, optionally with a
    /// 5-character short code (`include_short_code`). The customer is the one identified in
    /// the checkout session `context.service_session_id` names: a session of another
    /// tenant is NOT_FOUND, of another branch or terminal FORBIDDEN, not yet IDENTIFIED or
    /// already closed VALIDATION_ERROR on `/context/service_session_id`. Without a session
    /// (the wallet app), name the customer with `customer` or `wallet_user_id`; with both,
    /// they must be the session's customer. A new mint replaces the previous nonce (a
    /// payment already in flight with it still completes). A same-key retry within the TTL
    /// returns the same nonce.
    #[oai(path = "/qr/mint", method = "post", operation_id = "mintQr")]
    async fn qr_mint(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<QrMintRequest>,
    ) -> poem::Result<Reply<QrMintResult>> {
        let st = state.0.clone();
        let principal = auth.0.clone();
        let b = body.value.clone();
        let mut e = Errors::default();
        let customer = b.customer(&mut e);
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        let session = optional_uuid(
            &mut e,
            "/context/service_session_id",
            &b.context.service_session_id,
        );
        e.finish()?;
        let req = payments::QrMint {
            customer,
            service_session_id: session,
            with_short_code: b.include_short_code,
            wallet_program_id: program,
        };
        key.run(&auth.0, &body, async move |txn, acting| {
            if let Some(Customer::Phone(phone)) = &req.customer {
                let phone = IdentityCredential::Phone(phone.clone());
                super::customers::identification_guard(&st, &principal, &phone).await?;
            }
            let now = Utc::now();
            let who = caller(&principal, acting, &b.context);
            let m = payments::mint_qr(txn, &st.sealer, &who, req, now).await?;
            let mut out = Outcome::new(QrMintResult {
                qr_payload: m.qr_payload.clone(),
                short_code: m.short_code.clone(),
                wallet_program_id: m.wallet.wallet_program_id.to_string(),
                expires_at: ts(m.nonce.expires_at),
                expires_in: (m.nonce.expires_at - now).num_seconds(),
            })
            .with_secret(m.qr_payload);
            if let Some(code) = m.short_code {
                out = out.with_secret(code);
            }
            Ok(out)
        })
        .await
    }

    /// Take a wallet payment
    ///
    /// Debits exactly `amount_minor` at once: released promotional grants first (earliest
    /// expiry first), then actual money. The credential is consumed with the debit; a
    /// failed debit (INSUFFICIENT_FUNDS, ...) leaves it usable. A retry with the same
    /// Idempotency-Key replays the result byte for byte and never debits twice.
    #[oai(path = "/payments", method = "post", operation_id = "paymentAuthorize")]
    async fn authorize(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<PaymentRequest>,
    ) -> poem::Result<Reply<PaymentResult>> {
        let received_at = Utc::now();
        let st = state.0.clone();
        let principal = auth.0.clone();
        let b = body.value.clone();
        let mut e = Errors::default();
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        let service_session_id = optional_uuid(
            &mut e,
            "/context/service_session_id",
            &b.context.service_session_id,
        );
        // Checked after the scope guard and the replay look-up (in `prepare`), so a caller
        // outside its scope hears FORBIDDEN and a retry of a committed payment its replay.
        let credential = b.credential();
        let is_short_code = matches!(credential, Ok(Credential::ShortCode { .. }));
        let basket = b.basket.as_ref().map(|bk| {
            bk.lines
                .iter()
                .map(|l| payments::BasketLine {
                    sku: l.sku.clone(),
                    quantity: l.quantity,
                    unit_price_minor: l.unit_price_minor,
                    extended_price_minor: l.extended_price_minor,
                    category: l.category.clone(),
                    discount_minor: l.discount_minor,
                })
                .collect()
        });
        let (amount_minor, currency, order_ref) =
            (b.amount_minor, b.currency.clone(), b.effective_order_ref());
        let merchant = b.context.parsed().merchant_id;
        let integration = principal.integration_id;
        let prep_state = st.clone();
        let result = key
            .run_prepared(
                &auth.0,
                &body,
                async move || {
                    let pay = payments::Pay {
                        credential: credential?,
                        amount_minor,
                        currency,
                        order_ref,
                        wallet_program_id: program,
                        basket,
                        received_at,
                        service_session_id,
                    };
                    let turn = match &pay.credential {
                        Credential::Otp { .. } => {
                            match payments::verify_otp(
                                &prep_state.db,
                                &prep_state.sealer,
                                merchant,
                                &pay,
                            )
                            .await?
                            {
                                // The wallet is known before the transaction: its payments take
                                // turns here rather than on the row lock.
                                Some(wallet) => Some(
                                    prep_state
                                        .wallet_queue
                                        .take(wallet, prep_state.db_lock_wait())
                                        .await?,
                                ),
                                None => None,
                            }
                        }
                        Credential::ShortCode { .. } => {
                            payments::short_code_guard(&prep_state.kv, integration).await?;
                            None
                        }
                        Credential::Qr { .. } => None,
                    };
                    Ok((pay, turn))
                },
                async move |txn, acting, (pay, turn)| {
                    let mut who = caller(&principal, acting, &b.context);
                    who.decision_trace_id = Some(decision_trace(Some(&b.meta)));
                    let who_trace = who.decision_trace_id.clone();
                    let paid = payments::pay(txn, &st.sealer, &who, pay, turn).await?;
                    let p = paid.payment;
                    let mut out = Outcome::new(PaymentResult {
                        payment_id: p.id.to_string(),
                        status: p.status.clone(),
                        wallet_id: p.wallet_id.to_string(),
                        amount_minor: p.amount_minor,
                        debited_promo_minor: p.debited_promo_minor,
                        debited_actual_minor: p.debited_actual_minor,
                        currency: p.currency.clone(),
                        order_ref: p.order_ref.clone(),
                        balance_after: paid.balance_after.into(),
                        completed_at: ts(p.completed_at),
                        needs_reconciliation: p.needs_reconciliation,
                        service_session_id: p.service_session_id.map(|s| s.to_string()),
                        cashback: paid.cashback.as_ref().map(super::customers::grant_item),
                    });
                    let voidable = p.status == "completed" && p.refunded_minor == 0;
                    out.meta = MetaExtra {
                        data_completeness_score: Some(p.data_completeness_score),
                        decision_trace_id: who_trace,
                        capabilities: Some(serde_json::json!({
                            "voidable": voidable,
                            "refundable": p.status == "completed",
                        })),
                    };
                    out.writes = paid.writes;
                    Ok(out)
                },
            )
            .await;
        if is_short_code && result.as_ref().is_err_and(is_failed_credential) {
            payments::short_code_failed(&state.0.kv, integration).await?;
        }
        result
    }

    /// Read a payment
    ///
    /// With its refunds. A payment of another merchant, or outside the caller's branch
    /// scope, is NOT_FOUND.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(path = "/payments/:id", method = "get", operation_id = "getPayment")]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        id: Path<String>,
    ) -> poem::Result<Reply<PaymentDetail>> {
        auth.require(Permission::Terminal)?;
        let id = path_uuid("path:id", &id.0)?;
        let st = state.0;
        // Same answer for a payment that does not exist and one the caller may not see.
        let p = payments::find_visible(&st.db, auth.principal(), id).await?;
        let refunds = payments::refunds_of(&st.db, p.id).await?;
        Ok(Reply::ok(&detail(&p, &refunds)))
    }

    /// Void a payment
    ///
    /// Reverses a completed payment in full (status `voided`, event payment.reversed).
    /// Voiding a voided payment changes nothing; a partly refunded payment cannot be voided
    /// (VALIDATION_ERROR: refund the rest instead).
    #[oai(
        path = "/payments/:id/void",
        method = "post",
        operation_id = "voidPayment"
    )]
    async fn void(
        &self,
        auth: TerminalJwtAuth,
        id: Path<String>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<VoidRequest>,
    ) -> poem::Result<Reply<ReversalResult>> {
        let id = path_uuid("path:id", &id.0)?;
        let reason = body.value.reason.clone();
        reverse(
            key,
            &auth.0,
            id,
            &body,
            &body.value.context,
            ReversalKind::Void,
            None,
            None,
            reason,
        )
        .await
    }

    /// Refund a payment
    ///
    /// Returns all or part of a payment (event payment.refunded); never more than was paid
    /// across all refunds. Actual money goes back first, then promotional parts, each to
    /// its grant while the grant is still usable (an expired or clawed-back grant's part is
    /// forfeited, not revived).
    #[oai(
        path = "/payments/:id/refund",
        method = "post",
        operation_id = "refundPayment"
    )]
    async fn refund(
        &self,
        auth: TerminalJwtAuth,
        id: Path<String>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<RefundRequest>,
    ) -> poem::Result<Reply<ReversalResult>> {
        let id = path_uuid("path:id", &id.0)?;
        let v = body.value.clone();
        reverse(
            key,
            &auth.0,
            id,
            &body,
            &body.value.context,
            ReversalKind::Refund,
            v.amount_minor,
            v.currency,
            v.reason,
        )
        .await
    }

    /// Capture a payment (reserved)
    ///
    /// Reserved for hold-and-capture flows. Nothing routes through it in this version:
    /// every payment completes at once, so a capture of a payment the caller can see
    /// answers VALIDATION_ERROR with `details.status`, and changes nothing.
    #[oai(
        path = "/payments/:id/capture",
        method = "post",
        operation_id = "capturePayment"
    )]
    async fn capture(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        id: Path<String>,
        body: JsonBody<CaptureRequest>,
    ) -> poem::Result<Reply<PaymentDetail>> {
        let id = path_uuid("path:id", &id.0)?;
        mutation::authorize(state.0, &auth.0, &body.value.context).await?;
        let p = payments::find_visible(&state.0.db, &auth.0, id).await?;
        Err(ApiError::new(
            ErrorCode::ValidationError,
            "Nothing to capture: payments complete at once in this version; capture is reserved for hold-and-capture flows.",
        )
        .with_details(serde_json::json!({"status": p.status, "fields": []}))
        .into())
    }
}

#[allow(clippy::too_many_arguments)]
async fn reverse<B>(
    key: Idempotent<'_>,
    principal: &Principal,
    id: Uuid,
    body: &JsonBody<B>,
    context: &RequestContext,
    kind: ReversalKind,
    amount: Option<i64>,
    currency: Option<String>,
    reason: Option<String>,
) -> poem::Result<Reply<ReversalResult>> {
    let p = principal.clone();
    let ctx = context.clone();
    key.run(principal, body, async move |txn, acting| {
        let who = caller(&p, acting, &ctx);
        let r =
            payments::reverse(txn, &p, &who, id, kind, amount, currency.as_deref(), reason).await?;
        let refunds = payments::refunds_of(txn, r.payment.id).await?;
        Ok(Outcome::new(ReversalResult {
            payment: detail(&r.payment, &refunds),
            refund: r.refund.as_ref().map(refund_view),
            balance_after: r.balance_after.into(),
            cashback_reversed_minor: r.rewards.cashback_minor,
            offer_reward_reversed_minor: r.rewards.offer_minor,
            rewards_unrecovered_minor: r.rewards.unrecovered_minor,
        }))
    })
    .await
}
