//! `POST /payments/otp/send`: a code texted to the customer for one order.
use crate::domain::credentials::scope::Acting;
use crate::http::pipeline::fields::Text;
use crate::http::pipeline::fields::{CurrencyCode, UuidText};
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::{
    domain::{
        customers::IdentityCredential,
        payments,
        validate::{self, Errors},
    },
    http::{
        openapi::tags::Tag,
        pipeline::auth::TerminalJwtAuth,
        pipeline::body::{JsonBody, Validate},
        pipeline::common::{RequestContext, RequestMeta, in_context, optional_uuid, phone, ts},
        pipeline::mutation::Idempotent,
        pipeline::reply::Reply,
    },
    idempotency::Outcome,
    state::AppState,
};

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
    pub phone: crate::http::pipeline::fields::Phone,
    /// The later payment must be for exactly this amount. Minimum 1.
    #[serde(default)]
    pub amount_minor: crate::http::pipeline::fields::AmountMinor,
    /// ISO-4217.
    #[serde(default)]
    pub currency: CurrencyCode,
    /// The anti-replay boundary: the payment's `order_ref` (or its
    /// `context.partner_session_id`) must equal it.
    #[serde(default)]
    pub order_ref: Text<1, 128>,
    /// Picks the program when the customer has wallets in several.
    #[oai(nullable)]
    pub wallet_program_id: Option<UuidText>,
}

impl Validate for OtpSendRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        phone(e, "/phone", &self.phone);
        self.amount_minor.check(e, "/amount_minor");
        validate::currency(e, "/currency", &self.currency);
        self.order_ref.check(e, "/order_ref");
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

pub struct OtpApi;

#[OpenApi(tag = "Tag::Payments")]
impl OtpApi {
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
        let b = &body.value;
        let mut e = Errors::default();
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        let req = payments::OtpSend {
            phone: validate::normalize_phone(&b.phone).unwrap_or_default(),
            amount_minor: *b.amount_minor,
            currency: b.currency.to_string(),
            order_ref: b.order_ref.to_string(),
            wallet_program_id: program,
            max_sends_per_wallet: st.config.otp_sends_per_wallet,
        };
        // The phone resolves a wallet: it counts as an identification.
        let phone = IdentityCredential::Phone(req.phone.clone());
        let (shared, caller_key) = (state.0, &auth.0);
        let guard = async move |acting: &Acting| {
            shared
                .guard()
                .before_identifying(caller_key, acting, &phone)
                .await?;
            Ok(())
        };
        key.run_prepared(&auth.0, &body, guard, async move |txn, acting, ()| {
            let who = in_context(acting, &b.context);
            let sent = payments::send_otp(txn, &st.sealer, &who, req, who.now()).await?;
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
}
