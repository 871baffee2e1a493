//! `POST /payments/{id}/void` and `/refund`: a payment's money back to the wallet.
use crate::http::pipeline::fields::CurrencyCode;
use crate::http::pipeline::fields::Text;
use crate::http::pipeline::fields::UuidText;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::http::payments::{PaymentDetail, detail};

use crate::{
    domain::{
        credentials::Principal,
        payments::{self, ReversalKind},
        validate::{self, Errors},
    },
    http::{
        customers::balance::BalanceView,
        openapi::tags::Tag,
        pipeline::auth::TerminalJwtAuth,
        pipeline::body::{JsonBody, Validate},
        pipeline::common::{RequestContext, RequestMeta, in_context, path_uuid, ts},
        pipeline::mutation::Idempotent,
        pipeline::reply::Reply,
    },
    idempotency::Outcome,
};

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

pub(crate) fn refund_view(r: &payments::Refund) -> RefundView {
    RefundView {
        refund_id: r.id.to_string(),
        kind: r.kind.clone(),
        amount_minor: r.amount_minor,
        returned_actual_minor: r.returned_actual_minor,
        returned_promo_minor: r.returned_promo_minor,
        forfeited_promo_minor: r.forfeited_promo_minor,
        reason: r.reason.clone(),
        created_at: ts(r.created_at),
    }
}

/// Void a payment: reverse it in full.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct VoidRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// 1 to 200 characters.
    #[oai(nullable)]
    pub reason: Option<Text<1, 200>>,
}

pub(super) fn reason(e: &mut Errors, r: &Option<Text<1, 200>>) {
    if let Some(r) = r {
        r.check(e, "/reason");
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
    pub amount_minor: Option<crate::http::pipeline::fields::AmountMinor>,
    /// When given, must be the payment's currency.
    #[oai(nullable)]
    pub currency: Option<CurrencyCode>,
    /// 1 to 200 characters.
    #[oai(nullable)]
    pub reason: Option<Text<1, 200>>,
}

impl Validate for RefundRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        if let Some(a) = self.amount_minor {
            a.check(e, "/amount_minor");
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

pub(super) async fn reverse<B>(
    key: Idempotent<'_>,
    principal: &Principal,
    body: &JsonBody<B>,
    context: &RequestContext,
    asked: payments::Reverse,
) -> poem::Result<Reply<ReversalResult>> {
    let p = principal.clone();
    let ctx = context.clone();
    key.run(principal, body, async move |txn, acting| {
        let who = in_context(acting, &ctx);
        let r = payments::reverse(txn, &p, &who, asked).await?;
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

pub struct ReversalsApi;

#[OpenApi(tag = "Tag::Payments")]
impl ReversalsApi {
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
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<VoidRequest>,
    ) -> poem::Result<Reply<ReversalResult>> {
        let id = path_uuid("path:id", &id.0)?;
        let reason = body.value.reason.clone();
        let void = payments::Reverse {
            payment_id: id,
            kind: ReversalKind::Void,
            amount: None,
            currency: None,
            reason: reason.map(String::from),
        };
        reverse(key, &auth.0, &body, &body.value.context, void).await
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
        id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<RefundRequest>,
    ) -> poem::Result<Reply<ReversalResult>> {
        let id = path_uuid("path:id", &id.0)?;
        let v = body.value.clone();
        let refund = payments::Reverse {
            payment_id: id,
            kind: ReversalKind::Refund,
            amount: v.amount_minor.map(|a| a.0),
            currency: v.currency.map(|c| c.into_string()),
            reason: v.reason.map(String::from),
        };
        reverse(key, &auth.0, &body, &body.value.context, refund).await
    }
}
