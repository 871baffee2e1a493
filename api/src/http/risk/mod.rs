//! A merchant's velocity limits (x-api-key, permission `risk`; docs/risk.md): read them,
//! and set them for the key's mode (a sandbox key sets the sandbox's, a live key the live
//! ones).
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::domain::risk::limits::{self, Limits, MAX_LIMIT, Set};
use crate::domain::validate::Errors;
use crate::http::customers::merchant_of;
use crate::http::pipeline::fields::{IntIn, UuidText};
use crate::http::pipeline::query_group::{Grouped, query_group};
use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::idempotency::Outcome;
use crate::state::AppState;

/// A limit: 1 up to 10^15, or null for none.
type Limit = Option<IntIn<1, MAX_LIMIT>>;

/// A merchant's velocity limits. Each is optional: null (or absent) is no limit. A PUT
/// replaces them all.
#[derive(Object, Deserialize, Serialize, Debug, Clone, Default)]
pub struct LimitsBody {
    /// Payments one wallet may make in any 24 hours.
    #[oai(nullable)]
    #[serde(default)]
    pub wallet_payments_24h_count: Limit,
    /// The most one wallet may pay in any 24 hours, in minor units.
    #[oai(nullable)]
    #[serde(default)]
    pub wallet_payments_24h_minor: Limit,
    /// Payments one wallet may make in any 7 days.
    #[oai(nullable)]
    #[serde(default)]
    pub wallet_payments_7d_count: Limit,
    /// The most one wallet may pay in any 7 days, in minor units.
    #[oai(nullable)]
    #[serde(default)]
    pub wallet_payments_7d_minor: Limit,
    /// The most one terminal may take in payments in any hour (counted by the minute), in
    /// minor units. The terminal is the one signed into the terminal JWT, else the API key.
    #[oai(nullable)]
    #[serde(default)]
    pub terminal_payments_1h_minor: Limit,
    /// The largest single payment, in minor units.
    #[oai(nullable)]
    #[serde(default)]
    pub payment_max_minor: Limit,
    /// The most one wallet may be topped up in any 24 hours, in minor units.
    #[oai(nullable)]
    #[serde(default)]
    pub wallet_topups_24h_minor: Limit,
}

impl LimitsBody {
    fn limits(&self) -> Limits {
        let v = |l: &Limit| l.map(|x| x.0);
        Limits {
            wallet_payments_24h_count: v(&self.wallet_payments_24h_count),
            wallet_payments_24h_minor: v(&self.wallet_payments_24h_minor),
            wallet_payments_7d_count: v(&self.wallet_payments_7d_count),
            wallet_payments_7d_minor: v(&self.wallet_payments_7d_minor),
            terminal_payments_1h_minor: v(&self.terminal_payments_1h_minor),
            payment_max_minor: v(&self.payment_max_minor),
            wallet_topups_24h_minor: v(&self.wallet_topups_24h_minor),
        }
    }

    fn of(l: &Limits) -> LimitsBody {
        let v = |x: Option<i64>| x.map(IntIn);
        LimitsBody {
            wallet_payments_24h_count: v(l.wallet_payments_24h_count),
            wallet_payments_24h_minor: v(l.wallet_payments_24h_minor),
            wallet_payments_7d_count: v(l.wallet_payments_7d_count),
            wallet_payments_7d_minor: v(l.wallet_payments_7d_minor),
            terminal_payments_1h_minor: v(l.terminal_payments_1h_minor),
            payment_max_minor: v(l.payment_max_minor),
            wallet_topups_24h_minor: v(l.wallet_topups_24h_minor),
        }
    }
}

/// Set the velocity limits of the merchant the request acts for (`context.merchant_id`).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct SetLimitsRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    #[serde(default)]
    pub limits: LimitsBody,
}

impl Validate for SetLimitsRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        limits::check(e, "/limits", &self.limits.limits());
    }
}

/// A merchant's velocity limits for one mode.
#[derive(Object, Serialize)]
pub struct LimitsView {
    pub merchant_id: String,
    /// True: the sandbox's limits (a sandbox key's); false: the live ones.
    pub sandbox: bool,
    pub limits: LimitsBody,
    /// When they were last set; null while the merchant has none.
    #[oai(nullable)]
    pub updated_at: Option<String>,
}

fn view(s: &Set) -> LimitsView {
    LimitsView {
        merchant_id: s.merchant_id.to_string(),
        sandbox: s.is_sandbox,
        limits: LimitsBody::of(&s.limits),
        updated_at: s.updated_at.map(ts),
    }
}

query_group! {
    /// Whose limits.
    pub struct LimitsQuery {
        /// The merchant (required for a platform key; a merchant key reads its own).
        merchant_id: Option<UuidText> = "merchant_id",
    }
}

pub struct RiskApi;

#[OpenApi(tag = "Tag::Risk")]
impl RiskApi {
    /// Read a merchant's velocity limits
    ///
    /// The limits of the key's mode (a sandbox key reads the sandbox's); all null until
    /// set. A merchant outside the key's scope is FORBIDDEN, whether or not it exists.
    ///
    /// Permission: `risk`.
    #[oai(path = "/risk/limits", method = "get", operation_id = "getRiskLimits")]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        query: Grouped<LimitsQuery>,
    ) -> poem::Result<Reply<LimitsView>> {
        auth.0.require(Permission::Risk)?;
        let st = state.0;
        let merchant = merchant_of(st, &auth.0, &query.0.merchant_id).await?;
        let acting =
            crate::domain::credentials::scope::authorize(&st.db, &auth.0, merchant, None).await?;
        Ok(Reply::ok(&view(
            &limits::of(&st.db, acting.merchant_id, acting.is_sandbox).await?,
        )))
    }

    /// Set a merchant's velocity limits
    ///
    /// Replaces the limits of the merchant the request acts for (`context.merchant_id`) in
    /// the key's mode; null (or absent) is no limit. They apply from the next payment or
    /// top-up, are checked inside its transaction, and never change a payment already made.
    /// Audited with the key.
    ///
    /// Permission: `risk`.
    #[oai(path = "/risk/limits", method = "put", operation_id = "setRiskLimits")]
    async fn put(
        &self,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<SetLimitsRequest>,
    ) -> poem::Result<Reply<LimitsView>> {
        auth.0.require(Permission::Risk)?;
        let l = body.value.limits.limits();
        key.run(&auth.0, &body, async |txn, acting| {
            let s = limits::set(txn, &auth.0, &acting, &l, chrono::Utc::now()).await?;
            Ok(Outcome::new(view(&s)))
        })
        .await
    }
}
