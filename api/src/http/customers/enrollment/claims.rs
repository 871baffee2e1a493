//! `POST /claims`: a verified customer takes the grants held for them.
use crate::domain::credentials::scope::Acting;
use crate::http::pipeline::fields::UuidText;
use crate::http::{customers::customer_named, pipeline::fields::alternatives::Alternatives};
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::http::customers::enrollment::{SkippedGrant, WalletBalance, released_parts};

use crate::{
    domain::{customers::enrollment, validate::Errors},
    http::{
        customers::{CustomerNamed, GrantItem, IdentityCredentialBody},
        openapi::tags::Tag,
        pipeline::auth::TerminalJwtAuth,
        pipeline::body::{Documented, JsonBody, Validate},
        pipeline::common::{RequestContext, RequestMeta, in_context},
        pipeline::mutation::Idempotent,
        pipeline::reply::Reply,
    },
    idempotency::Outcome,
    state::AppState,
};

// --- Claims ------------------------------------------------------------------------------

/// Release a verified customer's locked grants.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ClaimRequest {
    /// Optional here: omitted, nothing is checked; given, it must be valid.
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    /// The VERIFIED wallet identity. Give this, `customer`, or both (naming the same
    /// customer).
    #[oai(nullable)]
    pub wallet_user_id: Option<UuidText>,
    /// The customer by identity credential.
    #[oai(nullable)]
    pub customer: Option<Documented<IdentityCredentialBody>>,
}

impl Validate for ClaimRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        CustomerNamed::parse(
            e,
            &CLAIM_CUSTOMER,
            &self.wallet_user_id,
            self.customer.as_ref().map(|c| &c.raw),
        );
    }
}

pub const CLAIM_CUSTOMER: Alternatives = customer_named("ClaimRequest");

/// What a claim did.
#[derive(Object, Serialize)]
pub struct ClaimResult {
    pub claim_id: String,
    /// `completed` (grants released), `nothing_to_claim` (verified, nothing locked left) or
    /// `pending_verification` (the phone is not proven yet; nothing released).
    pub state: String,
    pub wallet_user_id: String,
    pub released_grants: Vec<GrantItem>,
    pub released_promo_minor: i64,
    pub skipped_grants: Vec<SkippedGrant>,
    pub wallets: Vec<WalletBalance>,
}

pub struct ClaimsApi;

#[OpenApi(tag = "Tag::Enrollment")]
impl ClaimsApi {
    /// Claim locked grants
    ///
    /// By `wallet_user_id` of a VERIFIED identity or by `customer` credential: releases
    /// every LOCKED, unexpired grant (promo_grant.released) and reports what was released
    /// and what was skipped with the reason (`expired`, `clawed_back`, `not_verified`).
    /// Nothing claimable, or a customer still pending proof, is a success that releases
    /// nothing (`state` says which).
    #[oai(path = "/claims", method = "post", operation_id = "createClaim")]
    async fn claim(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<ClaimRequest>,
    ) -> poem::Result<Reply<ClaimResult>> {
        let st = state.0.clone();
        let p = &auth.0;
        let b = &body.value;
        let mut e = Errors::default();
        let named = CustomerNamed::parse(
            &mut e,
            &CLAIM_CUSTOMER,
            &b.wallet_user_id,
            b.customer.as_ref().map(|c| &c.raw),
        );
        e.finish()?;
        let shared = state.0;
        let guarded = async move |acting: &Acting| named.credentials(shared, p, acting).await;
        key.run_prepared(&auth.0, &body, guarded, async move |txn, acting, named| {
            let who = in_context(acting, &b.context);
            let c = enrollment::claim(txn, &st.sealer, &who, &named, who.now()).await?;
            let (released_grants, skipped_grants, wallets) = released_parts(&c.released);
            Ok(Outcome::new(ClaimResult {
                claim_id: c.claim_id.to_string(),
                state: c.state.as_str().into(),
                wallet_user_id: c.identity.id.to_string(),
                released_promo_minor: c.released.released_promo_minor(),
                released_grants,
                skipped_grants,
                wallets,
            }))
        })
        .await
    }
}
