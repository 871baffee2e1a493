//! The redeem balance check (terminal JWT): `POST /redeem/balance-check`.
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::domain::risk::failures::{Entry, Till};
use crate::http::{
    customers::balance::BalanceView,
    openapi::tags::Tag,
    payments::{CheckedCredential, parse_credential, validate_credential},
    pipeline::auth::TerminalJwtAuth,
    pipeline::body::{Documented, JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, in_context, optional_uuid, ts},
    pipeline::mutation::{self, OptionalKey},
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        payments::balance_check::{self, Check},
        validate::{self, Errors},
    },
    state::AppState,
};

pub struct BalanceCheckApi;

/// What a payment with this credential could do now.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct BalanceCheckRequest {
    #[serde(default)]
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    /// The credential the payment would present (as `POST /payments` takes it). For an
    /// `otp` credential only `otp_session_id` is needed: the check never verifies (or
    /// counts) a code.
    #[serde(default)]
    pub credential: Documented<CheckedCredential>,
    /// The amount the payment would debit. Minimum 1.
    #[serde(default)]
    pub amount_minor: crate::http::pipeline::fields::AmountMinor,
    /// ISO-4217.
    #[serde(default)]
    pub currency: crate::http::pipeline::fields::CurrencyCode,
    /// When given, must be the program of the wallet the credential belongs to.
    #[oai(nullable)]
    pub wallet_program_id: Option<crate::http::pipeline::fields::UuidText>,
}

impl Validate for BalanceCheckRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        validate_credential(e, &self.credential.raw, false);
        self.amount_minor.check(e, "/amount_minor");
        validate::currency(e, "/currency", &self.currency);
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
    }
}

/// The answer: whether the payment would go through now, and how it would split. Nothing
/// was reserved: the payment decides, and the balance may move in between.
#[derive(Object, Serialize)]
pub struct BalanceCheckResult {
    /// True when a payment of `amount_minor` with this credential would be debited now.
    pub can_pay: bool,
    /// Why not: `insufficient_funds` or `pending_proof` (the customer has not verified
    /// the phone yet; the payment would be FORBIDDEN). Null when `can_pay`.
    #[oai(nullable)]
    pub reason: Option<String>,
    pub wallet_id: String,
    pub wallet_program_id: String,
    /// VERIFIED or PENDING_PROOF.
    pub customer_state: String,
    pub amount_minor: i64,
    pub currency: String,
    /// Released promotional credit plus actual money: what can be spent now.
    pub spendable_minor: i64,
    /// How the payment would split (promotional credit first, earliest expiry first);
    /// both 0 when the funds do not cover it.
    pub would_debit_promo_minor: i64,
    pub would_debit_actual_minor: i64,
    /// What is missing when the funds do not cover it; else 0.
    pub shortfall_minor: i64,
    pub balance: BalanceView,
    /// When the presented credential stops being usable.
    pub credential_expires_at: String,
}

#[OpenApi(tag = "Tag::Payments")]
impl BalanceCheckApi {
    /// Check a redeem balance
    ///
    /// What the wallet a payment credential belongs to could pay now for `amount_minor`,
    /// and how the debit would split, without consuming, locking or counting anything: a
    /// read-shaped POST (the spec's "redeem balance check"). The credential is checked as
    /// the payment would check it and answers its errors (a used QR nonce is 400
    /// CREDENTIAL_EXPIRED_OR_REPLAYED, an expired OTP session OTP_EXPIRED, a static
    /// identifier 422 REQUIRES_DYNAMIC_CREDENTIAL); an OTP code is never verified here. A
    /// credential refused as unknown, expired or used counts as a failed credential of the
    /// terminal, as a payment's does, and a blocked terminal is refused (see Risk controls). Insufficient funds and a pending-proof customer are 200 with
    /// `can_pay` false and the `reason`. The Idempotency-Key header is optional: the call
    /// is safe to retry.
    #[oai(
        path = "/redeem/balance-check",
        method = "post",
        operation_id = "checkRedeemBalance"
    )]
    async fn check(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// Optional (UUID). The check writes nothing, so a retry simply checks again.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<BalanceCheckRequest>,
    ) -> poem::Result<Reply<BalanceCheckResult>> {
        let st = state.0;
        let principal = &auth.0;
        key.check()?;
        let b = &body.value;
        let acting = mutation::authorize(st, principal, &b.context).await?;
        let credential = parse_credential(&b.credential.raw)?;
        let till = Till::of(&acting);
        st.guard().before_trying(&till, credential.entry()).await?;
        let who = in_context(acting, &b.context);
        let check = Check {
            credential,
            amount_minor: *b.amount_minor,
            currency: b.currency.to_string(),
            wallet_program_id: b
                .wallet_program_id
                .as_deref()
                .and_then(|p| uuid::Uuid::parse_str(p).ok()),
        };
        let r = balance_check::check(&st.db, &st.sealer, &who, check, who.now()).await;
        st.guard()
            .after_trying(Some(&till), Some(Entry::BalanceCheck), r.as_ref().err())
            .await?;
        let r = r?;
        Ok(Reply::ok(&BalanceCheckResult {
            can_pay: r.refusal.is_none(),
            reason: r.refusal.map(|x| x.as_str().to_string()),
            wallet_id: r.wallet.id.to_string(),
            wallet_program_id: r.wallet.wallet_program_id.to_string(),
            customer_state: r.owner.state.as_str().to_string(),
            amount_minor: *b.amount_minor,
            currency: r.wallet.currency.clone(),
            spendable_minor: r.spendable_minor,
            would_debit_promo_minor: r.would_debit_promo_minor,
            would_debit_actual_minor: r.would_debit_actual_minor,
            shortfall_minor: r.shortfall_minor,
            balance: r.balance.into(),
            credential_expires_at: ts(r.credential_expires_at),
        }))
    }
}
