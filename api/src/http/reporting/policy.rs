//! A merchant's accounting policy (x-api-key, permission `reporting`): dormancy and the
//! expected breakage the reports estimate (docs/accounting.md).
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::domain::ledger::policy::{self, NewPolicy, Policy};
use crate::domain::{transactions, validate::Errors};
use crate::http::pipeline::fields::{BreakageMethods, Field, IntIn, OneOf, UuidText};
use crate::http::pipeline::query_group::{Grouped, query_group};
use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::idempotency::Outcome;
use crate::state::AppState;

/// Set the merchant's accounting policy (the merchant is `context.merchant_id`).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct SetPolicyRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Days without a customer-initiated movement (a payment, a top-up) after which a wallet
    /// is dormant: `dormant_wallets` lists it, and the `remote` method recognises its
    /// breakage then. 30 to 3650.
    #[serde(default)]
    pub dormancy_days: IntIn<30, 3650>,
    /// The share of customer-paid value expected never to be redeemed, in basis points
    /// (0 to 9999).
    #[serde(default)]
    pub breakage_rate_bp: IntIn<0, 9999>,
    /// `proportional` (recognised as customers redeem: ASC 606 / IFRS 15) or `remote`
    /// (only once a wallet is dormant).
    #[serde(default)]
    pub breakage_method: Field<OneOf<BreakageMethods>>,
}

impl Validate for SetPolicyRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.dormancy_days.check(e, "/dormancy_days");
        self.breakage_rate_bp.check(e, "/breakage_rate_bp");
        self.breakage_method.check(e, "/breakage_method");
    }
}

/// A merchant's accounting policy.
#[derive(Object, Serialize)]
pub struct PolicyView {
    pub merchant_id: String,
    pub dormancy_days: i32,
    pub breakage_rate_bp: i32,
    pub breakage_method: String,
    /// When it was last set; null while the merchant has the defaults (1095 days, no
    /// breakage expected, proportional).
    #[oai(nullable)]
    pub updated_at: Option<String>,
}

fn view(p: &Policy) -> PolicyView {
    PolicyView {
        merchant_id: p.merchant_id.to_string(),
        dormancy_days: p.dormancy_days,
        breakage_rate_bp: p.breakage_rate_bp,
        breakage_method: p.breakage_method.clone(),
        updated_at: p.updated_at.map(ts),
    }
}

query_group! {
    /// Whose policy.
    pub struct PolicyQuery {
        /// The merchant (required for a platform key; a merchant key reads its own).
        merchant_id: Option<UuidText> = "merchant_id",
    }
}

pub struct PolicyApi;

#[OpenApi(tag = "Tag::Reporting")]
impl PolicyApi {
    /// Read a merchant's accounting policy
    ///
    /// The dormancy period and expected breakage the reports use; the defaults (1095 days,
    /// 0 bp, proportional) until it is set. A merchant the key cannot read is NOT_FOUND.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/accounting/policy",
        method = "get",
        operation_id = "getAccountingPolicy"
    )]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        query: Grouped<PolicyQuery>,
    ) -> poem::Result<Reply<PolicyView>> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        let mut e = Errors::default();
        let asked = crate::http::pipeline::common::optional_uuid(
            &mut e,
            "query:merchant_id",
            &query.0.merchant_id,
        );
        e.finish()?;
        Ok(Reply::ok(&view(
            &policy::readable(&state.0.db, &auth.0, asked).await?,
        )))
    }

    /// Set a merchant's accounting policy
    ///
    /// Sets the dormancy period and the expected breakage (rate and method) of the merchant
    /// the request acts for (`context.merchant_id`), replacing what it had. Reports use it
    /// from their next run; it never posts to the ledger and never changes what a customer
    /// can spend. Audited with the key.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/accounting/policy",
        method = "put",
        operation_id = "setAccountingPolicy"
    )]
    async fn put(
        &self,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<SetPolicyRequest>,
    ) -> poem::Result<Reply<PolicyView>> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        let b = &body.value;
        let new = NewPolicy {
            dormancy_days: b.dormancy_days.0,
            breakage_rate_bp: b.breakage_rate_bp.0,
            breakage_method: &b.breakage_method,
        };
        let mut e = Errors::default();
        policy::check(&mut e, &new);
        e.finish()?;
        key.run(&auth.0, &body, async |txn, acting| {
            let p = policy::set(txn, &auth.0, acting.merchant_id, &new, chrono::Utc::now()).await?;
            Ok(Outcome::new(view(&p)))
        })
        .await
    }
}
