//! Offers (`/offers`): armed for a customer or a basket, evaluated at the till, redeemed
//! with a payment, cancelled.
use crate::domain::credentials::scope::Acting;
use crate::http::customers::customer_named;
use crate::http::pipeline::fields::{
    AmountMinor, CurrencyCode, Cursor, Field, IntIn, OfferStates, OneOf, PageLimit, Text, UuidText,
    alternatives::Alternatives,
};
use crate::http::pipeline::query_group::{Grouped, query_group};
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi,
    param::{Path, Query},
};
use serde::{Deserialize, Serialize};

use crate::http::incentives::{EnvelopeOnly, RewardBody};

use crate::{
    domain::{
        credentials::Permission,
        incentives::offers::{self, NewOffer, Offer},
        validate::{self, Errors},
    },
    envelope,
    error::ApiError,
    http::{
        customers::balance::BalanceView,
        customers::{CustomerNamed, GrantItem, IdentityCredentialBody, grant_item, merchant_of},
        openapi::tags::Tag,
        pipeline::auth::AnyAuth,
        pipeline::body::{Documented, JsonBody, Validate},
        pipeline::common::{RequestContext, RequestMeta, in_context, optional_uuid, path_uuid, ts},
        pipeline::mutation::{self, Idempotent, OptionalKey},
        pipeline::reply::Reply,
    },
    idempotency::Outcome,
    state::AppState,
};

// --- offers ------------------------------------------------------------------------------

/// Arm an offer for a customer.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OfferRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The customer: give this, `customer`, or both (naming the same customer).
    #[oai(nullable)]
    pub wallet_user_id: Option<UuidText>,
    /// The customer by identity credential (the same shapes as POST /identify).
    #[oai(nullable)]
    pub customer: Option<Documented<IdentityCredentialBody>>,
    /// Picks the program when the merchant runs several in the currency.
    #[oai(nullable)]
    pub wallet_program_id: Option<UuidText>,
    /// Shown to the cashier, 1 to 120 characters.
    #[serde(default)]
    pub name: Text<1, 120>,
    #[serde(default)]
    pub currency: CurrencyCode,
    #[serde(default)]
    pub reward: RewardBody,
    /// Payments below this amount do not qualify (default 1).
    #[oai(nullable)]
    pub min_amount_minor: Option<AmountMinor>,
    /// RFC 3339, in the future: unredeemed by then, the offer expires (offer.expired).
    #[serde(default)]
    pub expires_at: crate::http::pipeline::fields::DateTimeText,
    /// A campaign budget the reward is taken from.
    #[oai(nullable)]
    pub budget_id: Option<UuidText>,
    /// Lifetime of the reward grant in days (default 90).
    #[oai(nullable)]
    pub grant_expiry_days: Option<IntIn<1, 3650>>,
}

impl Validate for OfferRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        CustomerNamed::parse(
            e,
            &OFFER_CUSTOMER,
            &self.wallet_user_id,
            self.customer.as_ref().map(|c| &c.raw),
        );
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
        self.name.check(e, "/name");
        validate::currency(e, "/currency", &self.currency);
        self.reward.check(e);
        if let Some(m) = &self.min_amount_minor {
            m.check(e, "/min_amount_minor");
        }
        validate::rfc3339(e, "/expires_at", &self.expires_at);
        optional_uuid(e, "/budget_id", &self.budget_id);
        if let Some(d) = &self.grant_expiry_days {
            d.check(e, "/grant_expiry_days");
        }
    }
}

pub const OFFER_CUSTOMER: Alternatives = customer_named("OfferRequest");
pub const EVALUATE_CUSTOMER: Alternatives = customer_named("EvaluateRequest");

/// An offer and where it stands.
#[derive(Object, Serialize)]
pub struct OfferView {
    pub offer_id: String,
    /// ARMED, REDEEMED, EXPIRED or CANCELLED (an ARMED offer past `expires_at` reads as
    /// EXPIRED at once).
    pub state: String,
    pub wallet_user_id: String,
    pub wallet_program_id: String,
    pub name: String,
    pub currency: String,
    pub reward: RewardBody,
    pub min_amount_minor: i64,
    pub expires_at: String,
    #[oai(nullable)]
    pub budget_id: Option<String>,
    pub grant_expiry_days: i32,
    /// Set once redeemed.
    #[oai(nullable)]
    pub payment_id: Option<String>,
    #[oai(nullable)]
    pub grant_id: Option<String>,
    #[oai(nullable)]
    pub rewarded_minor: Option<i64>,
    #[oai(nullable)]
    pub redeemed_at: Option<String>,
    pub merchant_id: String,
    pub created_at: String,
}

pub(super) fn offer_view(o: &Offer) -> OfferView {
    OfferView {
        offer_id: o.id.to_string(),
        state: o.state.to_string(),
        wallet_user_id: o.wallet_user_id.to_string(),
        wallet_program_id: o.wallet_program_id.to_string(),
        name: o.name.clone(),
        currency: o.currency.clone(),
        reward: RewardBody {
            amount_minor: o.reward_minor.map(AmountMinor),
            percent_bps: o.reward_bps.map(|b| IntIn(b.into())),
            max_reward_minor: o.max_reward_minor.map(AmountMinor),
        },
        min_amount_minor: o.min_amount_minor,
        expires_at: ts(o.expires_at),
        budget_id: o.budget_id.map(|b| b.to_string()),
        grant_expiry_days: o.grant_expiry_days,
        payment_id: o.payment_id.map(|p| p.to_string()),
        grant_id: o.grant_id.map(|g| g.to_string()),
        rewarded_minor: o.rewarded_minor,
        redeemed_at: o.redeemed_at.map(ts),
        merchant_id: o.merchant_id.to_string(),
        created_at: ts(o.created_at),
    }
}

/// Which offers a prospective payment would earn.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct EvaluateRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    #[oai(nullable)]
    pub wallet_user_id: Option<UuidText>,
    /// The customer by identity credential.
    #[oai(nullable)]
    pub customer: Option<Documented<IdentityCredentialBody>>,
    /// The basket total the payment would be for.
    #[serde(default)]
    pub amount_minor: AmountMinor,
    #[serde(default)]
    pub currency: CurrencyCode,
}

impl Validate for EvaluateRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        CustomerNamed::parse(
            e,
            &EVALUATE_CUSTOMER,
            &self.wallet_user_id,
            self.customer.as_ref().map(|c| &c.raw),
        );
        self.amount_minor.check(e, "/amount_minor");
        validate::currency(e, "/currency", &self.currency);
    }
}

/// One armed offer against the prospective payment.
#[derive(Object, Serialize)]
pub struct OfferEvaluation {
    pub offer: OfferView,
    pub eligible: bool,
    /// What redeeming it against this payment would grant.
    pub reward_minor: i64,
    /// Why not, when not eligible: `currency_mismatch`, `below_minimum` or
    /// `budget_exhausted`.
    #[oai(nullable)]
    pub reason: Option<String>,
}

#[derive(Object, Serialize)]
pub struct EvaluationResult {
    pub wallet_user_id: String,
    pub offers: Vec<OfferEvaluation>,
}

/// Redeem an offer against a completed payment.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct RedeemRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// A completed payment of the offer's customer, made after the offer was armed.
    #[serde(default)]
    pub payment_id: UuidText,
}

impl Validate for RedeemRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        validate::uuid(e, "/payment_id", &self.payment_id);
    }
}

#[derive(Object, Serialize)]
pub struct RedeemResult {
    pub offer: OfferView,
    /// The reward, a RELEASED grant with source OFFER.
    pub grant: GrantItem,
    pub wallet_id: String,
    pub balance_after: BalanceView,
}

pub struct OffersApi;

query_group! {
    /// Which offers, and the page.
    pub struct OfferQuery {
        merchant_id: Option<UuidText> = "merchant_id",
        wallet_user_id: Option<UuidText> = "wallet_user_id",
        offer_state: Option<Field<OneOf<OfferStates>>> = "state",
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

#[OpenApi(tag = "Tag::Incentives")]
impl OffersApi {
    /// Arm an offer (beta)
    ///
    /// Arms a reward for one known customer until `expires_at` (offer.armed). The customer
    /// earns it by a payment made after arming and redeemed against the offer.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(path = "/offers", method = "post", operation_id = "armOffer")]
    async fn arm_offer(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<OfferRequest>,
    ) -> poem::Result<Reply<OfferView>> {
        auth.require(Permission::Terminal)?;
        let st = state.0.clone();
        let b = &body.value;
        let mut e = Errors::default();
        let named = CustomerNamed::parse(
            &mut e,
            &OFFER_CUSTOMER,
            &b.wallet_user_id,
            b.customer.as_ref().map(|c| &c.raw),
        );
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        let budget = optional_uuid(&mut e, "/budget_id", &b.budget_id);
        let reward = b.reward.check(&mut e);
        let expires_at = validate::rfc3339(&mut e, "/expires_at", &b.expires_at);
        e.finish()?;
        let (reward, expires_at) = reward
            .zip(expires_at)
            .ok_or_else(|| ApiError::internal("validated offer"))?;
        let (shared, principal) = (state.0, auth.principal());
        let guarded =
            async move |acting: &Acting| named.credentials(shared, principal, acting).await;
        key.run_prepared(
            principal,
            &body,
            guarded,
            async move |txn, acting, named| {
                let who = in_context(acting, &b.context);
                let now = who.now();
                let o = offers::arm(
                    txn,
                    &st.sealer,
                    &who,
                    NewOffer {
                        named,
                        wallet_program_id: program,
                        name: b.name.to_string(),
                        currency: b.currency.to_string(),
                        reward,
                        min_amount_minor: b.min_amount_minor.map_or(1, |m| m.0),
                        expires_at,
                        budget_id: budget,
                        grant_expiry_days: b.grant_expiry_days.map(|d| d.0 as i32),
                    },
                    now,
                )
                .await?;
                Ok(Outcome::new(offer_view(&o)))
            },
        )
        .await
    }

    /// List offers (beta)
    ///
    /// Newest first, optionally for one customer (`wallet_user_id`) and in one `state`.
    /// Cursor-paginated (`limit` 1–200, default 50).
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(path = "/offers", method = "get", operation_id = "listOffers")]
    async fn list_offers(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        query: Grouped<OfferQuery>,
    ) -> poem::Result<Reply<Vec<OfferView>>> {
        auth.require(Permission::Terminal)?;
        let st = state.0;
        let OfferQuery {
            merchant_id,
            wallet_user_id,
            offer_state,
            limit,
            cursor,
        } = query.0;
        let mut e = Errors::default();
        let who = optional_uuid(&mut e, "query:wallet_user_id", &wallet_user_id);
        if let Some(s) = &offer_state {
            s.check(&mut e, "query:state");
        }
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("offer", &cursor)?;
        let merchant = merchant_of(st, auth.principal(), &merchant_id).await?;
        let clock = auth.principal().clock();
        let (rows, more) = offers::list(
            &st.db,
            merchant,
            who,
            offer_state.as_deref(),
            after,
            limit,
            clock.now(),
        )
        .await?;
        let page = crate::http::pipeline::cursor::page("offer", &rows, more, |o| o.id);
        Ok(Reply::page(
            &rows.iter().map(offer_view).collect::<Vec<_>>(),
            &page,
        ))
    }

    /// Get an offer (beta)
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(path = "/offers/:offer_id", method = "get", operation_id = "getOffer")]
    async fn get_offer(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        offer_id: Path<UuidText>,
        merchant_id: Query<Option<UuidText>>,
    ) -> poem::Result<Reply<OfferView>> {
        auth.require(Permission::Terminal)?;
        let st = state.0;
        let id = path_uuid("path:offerId", &offer_id.0)?;
        let merchant = merchant_of(st, auth.principal(), &merchant_id.0).await?;
        let clock = auth.principal().clock();
        let o = offers::show(&st.db, merchant, id, clock.now()).await?;
        Ok(Reply::ok(&offer_view(&o)))
    }

    /// Evaluate offers (beta)
    ///
    /// Which of the customer's armed offers a payment of `amount_minor` would earn, and how
    /// much; ineligible ones say why. Read-shaped: it writes nothing, so the
    /// Idempotency-Key header is optional.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(
        path = "/offers/evaluate",
        method = "post",
        operation_id = "evaluateOffers"
    )]
    async fn evaluate(
        &self,
        state: Data<&AppState>,
        auth: AnyAuth,
        /// Optional (UUID). Evaluation writes nothing, so a retry simply evaluates again.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<EvaluateRequest>,
    ) -> poem::Result<Reply<EvaluationResult>> {
        auth.require(Permission::Terminal)?;
        let st = state.0;
        let principal = auth.principal();
        key.check()?;
        let acting = mutation::authorize(st, principal, &body.value.context).await?;
        let b = &body.value;
        let mut e = Errors::default();
        let named = CustomerNamed::parse(
            &mut e,
            &EVALUATE_CUSTOMER,
            &b.wallet_user_id,
            b.customer.as_ref().map(|c| &c.raw),
        );
        e.finish()?;
        let named = named.credentials(st, principal, &acting).await?;
        let who = in_context(acting, &b.context);
        let now = who.now();
        let (wallet_user_id, found) = offers::evaluate(
            &st.db,
            &st.sealer,
            &who,
            &named,
            *b.amount_minor,
            &b.currency,
            now,
        )
        .await?;
        // Evaluation writes nothing: its decision is kept in the log under its trace id.
        let trace = crate::http::pipeline::common::decision_trace(Some(&b.meta));
        tracing::info!(
            decision_trace_id = %trace,
            wallet_user_id = %wallet_user_id,
            offers = found.len(),
            eligible = found.iter().filter(|x| x.ineligible.is_none()).count(),
            "offers evaluated"
        );
        let meta = envelope::MetaExtra {
            decision_trace_id: Some(trace),
            ..Default::default()
        };
        Ok(Reply::rendered(envelope::ok_with(
            &EvaluationResult {
                wallet_user_id: wallet_user_id.to_string(),
                offers: found
                    .iter()
                    .map(|x| OfferEvaluation {
                        offer: offer_view(&x.offer),
                        eligible: x.ineligible.is_none(),
                        reward_minor: x.reward_minor,
                        reason: x.ineligible.map(str::to_string),
                    })
                    .collect(),
            },
            &meta,
        )))
    }

    /// Redeem an offer (beta)
    ///
    /// Redeems an armed offer against a completed payment of its customer made after the
    /// offer was armed: the reward (on what the payment holds after refunds) accrues as a
    /// RELEASED grant with source OFFER (offer.redeemed, promo_grant.accrued). The reward
    /// is taken whole from the offer's budget or the redemption fails with the issue
    /// `budget_exhausted` and the offer stays ARMED. One offer per payment. An offer that
    /// is not ARMED is VALIDATION_ERROR with `details.offer_state`.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(
        path = "/offers/:offer_id/redeem",
        method = "post",
        operation_id = "redeemOffer"
    )]
    async fn redeem(
        &self,
        auth: AnyAuth,
        offer_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<RedeemRequest>,
    ) -> poem::Result<Reply<RedeemResult>> {
        auth.require(Permission::Terminal)?;
        let id = path_uuid("path:offerId", &offer_id.0)?;
        let p = auth.principal().clone();
        let b = &body.value;
        let payment = path_uuid("/payment_id", &b.payment_id)?;
        key.run(auth.principal(), &body, async move |txn, acting| {
            let who = in_context(acting, &b.context);
            let now = who.now();
            let r = offers::redeem(txn, &p, &who, id, payment, now).await?;
            Ok(Outcome::new(RedeemResult {
                offer: offer_view(&r.offer),
                wallet_id: r.grant.wallet_id.to_string(),
                grant: grant_item(&r.grant),
                balance_after: r.balance_after.into(),
            }))
        })
        .await
    }

    /// Cancel an offer (beta)
    ///
    /// Withdraws an ARMED offer (CANCELLED). Cancelling a cancelled offer changes nothing;
    /// a redeemed or expired one is VALIDATION_ERROR with `details.offer_state`.
    ///
    /// An x-api-key caller needs the permission `terminal` (a terminal JWT holds it).
    #[oai(
        path = "/offers/:offer_id/cancel",
        method = "post",
        operation_id = "cancelOffer"
    )]
    async fn cancel(
        &self,
        auth: AnyAuth,
        offer_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<EnvelopeOnly>,
    ) -> poem::Result<Reply<OfferView>> {
        auth.require(Permission::Terminal)?;
        let id = path_uuid("path:offerId", &offer_id.0)?;
        let clock = auth.principal().clock();
        key.run(auth.principal(), &body, async move |txn, acting| {
            let now = clock.now();
            let o = offers::cancel(txn, acting.merchant_id, id, now).await?;
            Ok(Outcome::new(offer_view(&o)))
        })
        .await
    }
}
