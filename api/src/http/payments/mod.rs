//! Payments: OTP send, QR mint, the payment itself, and reading, voiding and refunding it.
//! Handlers parse, check scope and hand over to `domain::payments`; the idempotent
//! transaction and the error envelope come from `mutation`.
pub mod balance_check;
pub mod checkout;
use crate::http::pipeline::fields::CurrencyCode;
use crate::http::pipeline::fields::Text;
mod credential;
mod otp;
mod qr;
mod reverse;

pub use credential::*;
pub use otp::*;
pub use qr::*;
pub use reverse::*;

use crate::http::pipeline::fields::UuidText;
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::{
    customers::balance::BalanceView,
    openapi::tags::Tag,
    pipeline::auth::{AnyAuth, TerminalJwtAuth},
    pipeline::body::{Documented, JsonBody, Validate},
    pipeline::common::{
        RequestContext, RequestMeta, decision_trace, in_context, optional_uuid, path_uuid, ts,
    },
    pipeline::mutation::{self, Idempotent},
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        payments::{self, Credential},
        risk::failures::Till,
        validate::{self, Errors},
    },
    envelope::MetaExtra,
    error::{ApiError, ErrorCode},
    idempotency::Outcome,
    state::AppState,
};

pub struct PaymentsApi;

pub use crate::domain::validate::MAX_AMOUNT_MINOR;

// --- QR mint ----------------------------------------------------------------------------

// --- Payment ----------------------------------------------------------------------------

/// One basket line. Line totals are captured for reconciliation; they never change the debit.
#[derive(Object, Deserialize, Serialize, Debug, Clone)]
pub struct BasketLine {
    /// 1 to 64 characters.
    pub sku: Text<1, 64>,
    /// Above 0 (a weight may be fractional).
    #[oai(validator(minimum(value = "0", exclusive)))]
    pub quantity: f64,
    pub unit_price_minor: LineAmount,
    pub extended_price_minor: LineAmount,
    /// 1 to 64 characters.
    #[oai(nullable)]
    pub category: Option<Text<1, 64>>,
    #[oai(nullable)]
    pub discount_minor: Option<LineAmount>,
}

/// A basket line's amount: 0 to `MAX_AMOUNT_MINOR`.
pub type LineAmount = crate::http::pipeline::fields::IntIn<0, MAX_AMOUNT_MINOR>;

impl Basket {
    pub fn check(&self, e: &mut Errors) {
        self.lines.check(e, "/basket/lines");
        for (i, l) in self.lines.iter().enumerate() {
            let f = |k: &str| format!("/basket/lines/{i}/{k}");
            l.sku.check(e, &f("sku"));
            // Published as an exclusive minimum of 0.
            if !(l.quantity.is_finite() && l.quantity > 0.0) {
                e.push(f("quantity"), "out_of_range", "must be a number above 0");
            }
            l.unit_price_minor.check(e, &f("unit_price_minor"));
            l.extended_price_minor.check(e, &f("extended_price_minor"));
            if let Some(d) = &l.discount_minor {
                d.check(e, &f("discount_minor"));
            }
            if let Some(c) = &l.category {
                c.check(e, &f("category"));
            }
        }
    }
}

#[derive(Object, Deserialize, Debug, Clone, Default)]
pub struct Basket {
    /// Up to 500 lines.
    #[serde(default)]
    #[oai(default)]
    pub lines: crate::http::pipeline::fields::List<BasketLine, 0, 500>,
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
    pub amount_minor: crate::http::pipeline::fields::AmountMinor,
    /// ISO-4217.
    #[serde(default)]
    pub currency: CurrencyCode,
    /// Your order or receipt reference; defaults to `context.partner_session_id`. For an
    /// `otp` credential this effective reference must be the one the OTP was sent for
    /// (else OTP_INVALID with `details.reason` session_mismatch naming `order_ref`).
    #[oai(nullable)]
    pub order_ref: Option<Text<1, 128>>,
    /// When given, must be the program of the wallet the credential belongs to.
    #[oai(nullable)]
    pub wallet_program_id: Option<UuidText>,
    /// Optional; raises `meta.data_completeness_score`.
    #[oai(nullable)]
    pub basket: Option<Basket>,
}

impl PaymentRequest {
    fn effective_order_ref(&self) -> Option<String> {
        self.order_ref
            .clone()
            .map(String::from)
            .or_else(|| self.context.partner_session_id.clone().map(String::from))
    }

    fn credential(&self) -> Result<Credential, ApiError> {
        parse_credential(&self.credential.raw)
    }
}

impl Validate for PaymentRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        validate_credential(e, &self.credential.raw, true);
        self.amount_minor.check(e, "/amount_minor");
        validate::currency(e, "/currency", &self.currency);
        if let Some(o) = &self.order_ref {
            o.check(e, "/order_ref");
        }
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
        if let Some(b) = &self.basket {
            b.check(e);
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
    pub cashback: Option<crate::http::customers::GrantItem>,
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

pub(super) fn detail(p: &payments::Payment, refunds: &[payments::Refund]) -> PaymentDetail {
    PaymentDetail {
        payment_id: p.id.to_string(),
        status: p.status.as_str().to_string(),
        wallet_id: p.wallet_id.to_string(),
        credential_type: p.credential_type.clone(),
        amount_minor: p.amount_minor,
        debited_promo_minor: p.debited_promo_minor,
        debited_actual_minor: p.debited_actual_minor,
        refunded_minor: p.refunded_minor,
        refundable_minor: p.can.refundable_minor,
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

#[OpenApi(tag = "Tag::Payments")]
impl PaymentsApi {
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
        let clock = auth.0.clock();
        let received_at = clock.now();
        let st = state.0.clone();
        let b = &body.value;
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
        let entry = credential.as_ref().ok().map(Credential::entry);
        let basket = b.basket.as_ref().map(|bk| {
            bk.lines
                .iter()
                .map(|l| payments::BasketLine {
                    sku: l.sku.to_string(),
                    quantity: l.quantity,
                    unit_price_minor: l.unit_price_minor.0,
                    extended_price_minor: l.extended_price_minor.0,
                    category: l.category.clone().map(String::from),
                    discount_minor: l.discount_minor.map(|d| d.0),
                })
                .collect()
        });
        let (amount_minor, currency, order_ref) = (
            b.amount_minor,
            b.currency.as_str().to_owned(),
            b.effective_order_ref(),
        );
        let prep_state = st.clone();
        // The payment's decision: its success and its refusals carry it in meta.
        let trace = decision_trace(Some(&b.meta));
        let trace_of_work = &trace;
        // Where the credential was entered: set once the payment will run (never for a
        // replay, which is no new attempt).
        let mut till = None;
        let till_slot = &mut till;
        let result = key
            .run_prepared(
                &auth.0,
                &body,
                async move |acting| {
                    let at = Till::of(acting);
                    let pay = payments::Pay {
                        credential: credential?,
                        amount_minor: *amount_minor,
                        currency,
                        order_ref,
                        wallet_program_id: program,
                        basket,
                        received_at,
                        service_session_id,
                    };
                    let admitted = prep_state.admission().admit(&at, &pay, clock).await;
                    *till_slot = Some(at);
                    Ok((pay, admitted?))
                },
                async move |txn, acting, (pay, admitted)| {
                    let mut who = in_context(acting, &b.context);
                    who.decision_trace_id = Some(trace_of_work.clone());
                    let who_trace = who.decision_trace_id.clone();
                    // Boxed: a payment's future is kilobytes, and the futures above it
                    // (idempotency, poem's layers) are copied as they move
                    // (see `store::db::pg_txn::acquire`).
                    let paid =
                        Box::pin(payments::pay(txn, &st.sealer, &who, pay, admitted)).await?;
                    let p = paid.payment;
                    let mut out = Outcome::new(PaymentResult {
                        payment_id: p.id.to_string(),
                        status: p.status.as_str().to_string(),
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
                        cashback: paid
                            .cashback
                            .as_ref()
                            .map(crate::http::customers::grant_item),
                    });
                    let can = p.can;
                    out.meta = MetaExtra {
                        data_completeness_score: Some(p.data_completeness_score),
                        decision_trace_id: who_trace,
                        capabilities: Some(serde_json::json!({
                            "voidable": can.voidable,
                            "refundable": can.refundable,
                        })),
                    };
                    Ok(out)
                },
            )
            .await;
        let refused = result
            .as_ref()
            .err()
            .and_then(|e| e.downcast_ref::<ApiError>());
        state
            .0
            .guard()
            .after_trying(till.as_ref(), entry, refused)
            .await?;
        result.map_err(|e| match e.downcast::<ApiError>() {
            Ok(refusal) => refusal.with_decision_trace(&trace).into(),
            Err(other) => other,
        })
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
        id: Path<UuidText>,
    ) -> poem::Result<Reply<PaymentDetail>> {
        auth.require(Permission::Terminal)?;
        let id = path_uuid("path:id", &id.0)?;
        let st = state.0;
        // Same answer for a payment that does not exist and one the caller may not see.
        let shown = payments::show(&st.db, auth.principal(), id).await?;
        Ok(Reply::ok(&detail(&shown.payment, &shown.refunds)))
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
        id: Path<UuidText>,
        body: JsonBody<CaptureRequest>,
    ) -> poem::Result<Reply<PaymentDetail>> {
        let id = path_uuid("path:id", &id.0)?;
        mutation::authorize(state.0, &auth.0, &body.value.context).await?;
        let p = payments::find_visible(&state.0.db, &auth.0, id).await?;
        Err(ApiError::new(
            ErrorCode::ValidationError,
            "Nothing to capture: payments complete at once in this version; capture is reserved for hold-and-capture flows.",
        )
        .with_details(serde_json::json!({"status": p.status.as_str(), "fields": []}))
        .into())
    }
}
