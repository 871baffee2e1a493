//! Corrections of a transaction after the fact (x-api-key, permission `corrections`):
//! disputes of a payment or top-up, and detaching a top-up from a customer.
use crate::http::pipeline::fields::Text;
use crate::http::pipeline::fields::UuidText;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::http::{
    customers::balance::BalanceView,
    openapi::tags::Tag,
    operator::wallets::{Reason, reason},
    payments::{RefundView, refund_view},
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, in_context, path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::Permission,
        topups::{TopupReversal, topup_reversals},
        transactions::disputes::{self, NewDispute},
        transactions::read::Dispute,
        validate::{self, Errors},
    },
    idempotency::Outcome,
};

/// Open a dispute of a payment or top-up.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OpenDisputeRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    /// `merchant_id` must be the transaction's merchant.
    #[serde(default)]
    pub context: RequestContext,
    /// What is disputed; default: all that is still disputable (a payment's amount not yet
    /// refunded). A top-up is disputed whole: omit it or send its credit.
    #[oai(nullable)]
    pub amount_minor: Option<crate::http::pipeline::fields::AmountMinor>,
    /// When given, must be the transaction's currency.
    #[oai(nullable)]
    pub currency: Option<crate::http::pipeline::fields::CurrencyCode>,
    /// Why (1 to 500 characters): the customer's claim, a case number.
    #[serde(default)]
    pub reason: Reason,
}

impl Validate for OpenDisputeRequest {
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

/// Resolve a dispute.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ResolveDisputeRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// `merchant_won` (nothing moves) or `customer_won` (a payment is refunded by the
    /// disputed amount; a top-up's credit is taken back from the wallet).
    #[serde(default)]
    pub outcome: crate::http::pipeline::fields::Field<
        crate::http::pipeline::fields::OneOf<crate::http::pipeline::fields::DisputeOutcomes>,
    >,
    /// Up to 500 characters, kept with the dispute and in the audit log.
    #[oai(nullable)]
    pub note: Option<Text<1, 500>>,
}

impl Validate for ResolveDisputeRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.outcome.check(e, "/outcome");
        if let Some(n) = &self.note {
            n.check(e, "/note");
        }
    }
}

/// Detach a top-up from the customer it was attached to.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct UnattachRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Why (1 to 500 characters), e.g. "cashier keyed the wrong phone number".
    #[serde(default)]
    pub reason: Reason,
}

impl Validate for UnattachRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        reason(e, &self.reason);
    }
}

/// A dispute of a transaction.
#[derive(Object, Serialize)]
pub struct DisputeView {
    pub dispute_id: String,
    pub transaction_id: String,
    /// `payment` or `topup`.
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    /// `open`, `merchant_won` or `customer_won`.
    pub status: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    /// What went back to the customer when they won: the refund's amount (a payment) or
    /// the credit taken back from the wallet (a top-up).
    pub recovered_minor: i64,
    /// What the customer won but the service could not move: a payment refunded otherwise
    /// since the dispute opened, or top-up credit the wallet had already spent.
    pub unrecovered_minor: i64,
    /// The refund or top-up reversal the resolution made (a movement in the feed).
    #[oai(nullable)]
    pub movement_id: Option<String>,
    #[oai(nullable)]
    pub resolution_note: Option<String>,
    pub created_at: String,
    #[oai(nullable)]
    pub resolved_at: Option<String>,
}

pub(super) fn dispute_view(d: &Dispute) -> DisputeView {
    DisputeView {
        dispute_id: d.id.to_string(),
        transaction_id: d.transaction_id.to_string(),
        kind: d.transaction_kind.clone(),
        status: d.status.as_str().to_string(),
        amount_minor: d.amount_minor,
        currency: d.currency.clone(),
        reason: d.reason.clone(),
        recovered_minor: d.recovered_minor,
        unrecovered_minor: d.unrecovered_minor,
        movement_id: d.movement_id.map(|m| m.to_string()),
        resolution_note: d.resolution_note.clone(),
        created_at: ts(d.created_at),
        resolved_at: d.resolved_at.map(ts),
    }
}

/// A top-up's credit taken back from the wallet.
#[derive(Object, Serialize)]
pub struct TopupReversalView {
    pub reversal_id: String,
    pub topup_id: String,
    /// `chargeback` (a dispute the customer won) or `unattach`.
    pub kind: String,
    pub wallet_id: String,
    /// Actual money taken back from the wallet.
    pub taken_back_minor: i64,
    /// Credit the wallet had already spent: not taken back.
    pub unrecovered_minor: i64,
    /// The unspent rest of the top-up's bonus grant, clawed back with it (the grant ends
    /// even when spent, so a refund of what it paid never revives it).
    pub bonus_clawed_back_minor: i64,
    #[oai(nullable)]
    pub reason: Option<String>,
    pub created_at: String,
}

pub(super) fn reversal_view(r: &TopupReversal) -> TopupReversalView {
    TopupReversalView {
        reversal_id: r.id.to_string(),
        topup_id: r.topup_id.to_string(),
        kind: r.kind.clone(),
        wallet_id: r.wallet_id.to_string(),
        taken_back_minor: r.taken_back_minor,
        unrecovered_minor: r.unrecovered_minor,
        bonus_clawed_back_minor: r.bonus_clawed_back_minor,
        reason: r.reason.clone(),
        created_at: ts(r.created_at),
    }
}

/// A dispute after its resolution, with the money it moved.
#[derive(Object, Serialize)]
pub struct DisputeResolution {
    pub dispute: DisputeView,
    /// The refund of a payment dispute the customer won.
    #[oai(nullable)]
    pub refund: Option<RefundView>,
    /// The chargeback of a top-up dispute the customer won.
    #[oai(nullable)]
    pub topup_reversal: Option<TopupReversalView>,
    /// The wallet after the money moved; null when nothing moved.
    #[oai(nullable)]
    pub balance_after: Option<BalanceView>,
}

/// A top-up detached from its customer.
#[derive(Object, Serialize)]
pub struct UnattachResult {
    pub transaction_id: String,
    /// Now `reversed`.
    pub status: String,
    pub topup_reversal: TopupReversalView,
    pub balance_after: BalanceView,
}

pub struct DisputesApi;

#[OpenApi(tag = "Tag::Transactions")]
impl DisputesApi {
    /// Open a dispute
    ///
    /// Records a dispute of a wallet payment or a credited top-up (transaction.disputed,
    /// status `open`, in the transaction's event sequence). Opening moves no money. The
    /// amount defaults to all that is still disputable (a payment's amount not refunded)
    /// and may not exceed it; a top-up is disputed whole (another amount is
    /// `whole_topup_only`). A voided or fully refunded payment, or a
    /// top-up that was never credited or already reversed, has nothing to dispute
    /// (VALIDATION_ERROR `nothing_to_dispute`). One open dispute per transaction: another
    /// is CONFLICT with `details.dispute_id`. `context.merchant_id` must be the
    /// transaction's merchant. Another integration's transaction is FORBIDDEN, an unknown
    /// one NOT_FOUND. Audited with the key.
    ///
    /// Permission: `corrections`.
    #[oai(
        path = "/:integration_id/transactions/:transaction_id/disputes",
        method = "post",
        operation_id = "openDispute"
    )]
    async fn open(
        &self,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        transaction_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<OpenDisputeRequest>,
    ) -> poem::Result<Reply<DisputeView>> {
        auth.0.require(Permission::Corrections)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        let id = path_uuid("path:transactionId", &transaction_id.0)?;
        let b = &body.value;
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async |txn, acting| {
            let dispute = NewDispute {
                amount_minor: b.amount_minor.map(|a| a.0),
                currency: b.currency.clone().map(String::from),
                reason: b.reason.to_string(),
            };
            let at = clock.now();
            let d = disputes::open(
                txn,
                &auth.0,
                acting.merchant_id,
                integration,
                id,
                dispute,
                at,
            )
            .await?;
            Ok(Outcome::new(dispute_view(&d)))
        })
        .await
    }

    /// Resolve a dispute
    ///
    /// `merchant_won` moves nothing. `customer_won` moves the money back through the flow
    /// that owns it: a payment is refunded by the disputed amount (at most what is still
    /// refundable; payment.refunded, its rewards taken back in proportion, the refund a
    /// movement in the feed); a top-up's credit is taken back from the wallet (a
    /// chargeback: what the wallet still holds of it, never below zero, the rest reported
    /// as `unrecovered_minor`; its bonus grant ended, the unspent rest back to the
    /// merchant and to the budget it drew on; the top-up `reversed`). Fires
    /// transaction.disputed with the outcome. Resolving again with the same outcome answers
    /// the dispute unchanged, with the refund or reversal it made then (`balance_after`
    /// null); another outcome is CONFLICT. Audited.
    ///
    /// Permission: `corrections`.
    #[oai(
        path = "/:integration_id/transactions/:transaction_id/disputes/:dispute_id/resolve",
        method = "post",
        operation_id = "resolveDispute"
    )]
    async fn resolve(
        &self,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        transaction_id: Path<UuidText>,
        dispute_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<ResolveDisputeRequest>,
    ) -> poem::Result<Reply<DisputeResolution>> {
        auth.0.require(Permission::Corrections)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        let id = path_uuid("path:transactionId", &transaction_id.0)?;
        let dispute = path_uuid("path:disputeId", &dispute_id.0)?;
        let (p, b) = (&auth.0, &body.value);
        key.run(p, &body, async |txn, acting| {
            let who = in_context(acting, &b.context);
            let note = b.note.clone().map(String::from);
            let at = who.now();
            let asked = disputes::Resolve {
                integration_id: integration,
                transaction_id: id,
                dispute_id: dispute,
                outcome: &b.outcome,
                note,
            };
            let r = disputes::resolve(txn, p, &who, asked, at).await?;
            Ok(Outcome::new(DisputeResolution {
                dispute: dispute_view(&r.dispute),
                refund: r.refund.as_ref().map(refund_view),
                topup_reversal: r.reversal.as_ref().map(reversal_view),
                balance_after: r.balance_after.map(Into::into),
            }))
        })
        .await
    }

    /// Detach a top-up from its customer
    ///
    /// For a top-up attached to the wrong customer (a cashier keyed another phone number):
    /// its credit leaves that wallet (what the wallet still holds of it, never below zero;
    /// the rest reported as unrecovered), the unspent rest of its bonus is clawed back, and
    /// the top-up becomes `reversed` (transaction.unattached in its sequence; the reversal
    /// is a movement in the feed). Ring the sale again for the right customer under a new
    /// `pos_order_ref` (the detached top-up keeps its order; the same order for another
    /// customer is VALIDATION_ERROR `already_used` on `/pos_order_ref`). Only a SKU top-up
    /// is detached: a wallet payment (refund or void it) and a settlement top-up (its
    /// provider reference credits once: dispute it) are VALIDATION_ERROR `not_detachable`,
    /// nor a top-up never credited or already reversed (`nothing_to_detach`), nor one with
    /// an open dispute (CONFLICT). Audited with the key.
    ///
    /// Permission: `corrections`.
    #[oai(
        path = "/:integration_id/transactions/:transaction_id/unattach",
        method = "post",
        operation_id = "unattachTransaction"
    )]
    async fn unattach(
        &self,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        transaction_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<UnattachRequest>,
    ) -> poem::Result<Reply<UnattachResult>> {
        auth.0.require(Permission::Corrections)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        let id = path_uuid("path:transactionId", &transaction_id.0)?;
        let (p, b) = (&auth.0, &body.value);
        let clock = auth.0.clock();
        key.run(p, &body, async |txn, acting| {
            let reason = b.reason.to_string();
            let at = clock.now();
            let r =
                topup_reversals::unattach(txn, p, acting.merchant_id, integration, id, reason, at)
                    .await?;
            Ok(Outcome::new(UnattachResult {
                transaction_id: r.topup.id.to_string(),
                status: "reversed".into(),
                topup_reversal: reversal_view(&r.reversal),
                balance_after: r.balance_after.into(),
            }))
        })
        .await
    }
}
