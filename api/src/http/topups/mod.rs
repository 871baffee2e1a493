//! SKU top-ups: registering the SKUs a till sells and ringing one up for a customer. A
//! customer's grants and their clawback are `grants`.
pub mod settlements;
use crate::domain::credentials::scope::Acting;
use crate::http::pipeline::fields::CurrencyCode;
use crate::http::pipeline::fields::Text;

use crate::http::pipeline::fields::UuidText;
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi,
    param::{Path, Query},
};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::pipeline::fields::alternatives::{Alternatives, Branch};
use crate::http::{
    customers::balance::BalanceView,
    customers::{IdentityCredentialBody, identity_credential},
    openapi::tags::Tag,
    pipeline::auth::{ApiKeyAuth, TerminalJwtAuth},
    pipeline::body::{Documented, JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, in_context, optional_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        topups::{self, Bonus, Sku, SkuTerms, SkuTopup, TopupOutcome},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

// --- SKUs --------------------------------------------------------------------------------

/// A SKU's bonus: exactly one of a fixed amount per unit or basis points of the credit.
#[derive(Object, Deserialize, Serialize, Debug, Clone)]
pub struct SkuBonus {
    /// Bonus per unit sold, in minor units.
    #[oai(nullable)]
    pub amount_minor: Option<crate::http::pipeline::fields::AmountMinor>,
    /// Bonus as basis points of the credit (1000 = 10 %), rounded down.
    #[oai(nullable)]
    pub percent_bps: Option<crate::http::pipeline::fields::IntIn<1, 100_000>>,
    /// Lifetime of the bonus grant in days (default 365): drives its `expires_at`.
    #[oai(nullable)]
    pub expiry_days: Option<crate::http::pipeline::fields::IntIn<1, 3650>>,
}

/// A SKU bonus is a fixed amount or a share, never both.
pub const SKU_BONUS: Alternatives = Alternatives {
    schema: "SkuBonus",
    branches: &[
        Branch {
            given: &["amount_minor"],
            absent: &["percent_bps"],
        },
        Branch {
            given: &["percent_bps"],
            absent: &["amount_minor"],
        },
    ],
    field: "",
    issue: "exactly_one",
    message: "give exactly one of amount_minor or percent_bps",
};

impl SkuBonus {
    fn check(&self, e: &mut Errors) {
        SKU_BONUS.check(e, "/bonus", |m| match m {
            "amount_minor" => self.amount_minor.is_some(),
            _ => self.percent_bps.is_some(),
        });
        if let Some(a) = &self.amount_minor {
            a.check(e, "/bonus/amount_minor");
        }
        if let Some(p) = &self.percent_bps {
            p.check(e, "/bonus/percent_bps");
        }
        if let Some(d) = &self.expiry_days {
            d.check(e, "/bonus/expiry_days");
        }
    }
}

/// Register a SKU, or change one (changes apply to later sales only).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct SkuRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Your SKU code, 1 to 64 characters; unique per merchant.
    #[serde(default)]
    pub sku_id: Text<1, 64>,
    #[serde(default)]
    pub name: Text<1, 200>,
    /// ISO-4217; one of the merchant's program currencies.
    #[serde(default)]
    pub currency: CurrencyCode,
    /// What one unit credits to the wallet's actual money. Minimum 1.
    #[serde(default)]
    pub wallet_credits_minor: crate::http::pipeline::fields::AmountMinor,
    #[oai(nullable)]
    pub bonus: Option<SkuBonus>,
    /// False stops further sales of the SKU. Default true.
    #[oai(nullable)]
    pub active: Option<bool>,
}

impl Validate for SkuRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.sku_id.check(e, "/sku_id");
        self.name.check(e, "/name");
        validate::currency(e, "/currency", &self.currency);
        self.wallet_credits_minor.check(e, "/wallet_credits_minor");
        if let Some(b) = &self.bonus {
            b.check(e);
        }
    }
}

/// A registered SKU.
#[derive(Object, Serialize)]
pub struct SkuView {
    pub sku_id: String,
    pub name: String,
    pub currency: String,
    pub wallet_credits_minor: i64,
    #[oai(nullable)]
    pub bonus: Option<SkuBonus>,
    pub active: bool,
    /// Counts changes; a top-up reports the version it was credited with.
    pub version: i32,
    pub merchant_id: String,
    pub created_at: String,
    pub updated_at: String,
}

fn sku_view(s: &Sku) -> SkuView {
    SkuView {
        sku_id: s.sku_id.clone(),
        name: s.name.clone(),
        currency: s.currency.clone(),
        wallet_credits_minor: s.wallet_credits_minor,
        bonus: s.bonus.map(|b| SkuBonus {
            amount_minor: match b {
                Bonus::PerUnit(m) => Some(crate::http::pipeline::fields::AmountMinor(m)),
                Bonus::PercentBps(_) => None,
            },
            percent_bps: match b {
                Bonus::PercentBps(p) => Some(crate::http::pipeline::fields::IntIn(p.into())),
                Bonus::PerUnit(_) => None,
            },
            expiry_days: s
                .bonus_expiry_days
                .map(|d| crate::http::pipeline::fields::IntIn(d.into())),
        }),
        active: s.active,
        version: s.version,
        merchant_id: s.merchant_id.to_string(),
        created_at: ts(s.created_at),
        updated_at: ts(s.updated_at),
    }
}

// --- SKU top-up --------------------------------------------------------------------------

/// Credit a wallet for a SKU sold at the POS.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct SkuTopupRequest {
    /// Optional here: omitted, nothing is checked; given, it must be valid.
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    /// The finalised POS order: one credit per order, however often it is reported.
    #[serde(default)]
    pub pos_order_ref: Text<1, 128>,
    /// The customer. A phone the merchant does not know yet gets a PENDING_PROOF
    /// proto-wallet that holds the credit until the customer enrolls.
    #[serde(default)]
    pub customer: Documented<IdentityCredentialBody>,
    /// Units sold, at least 1. The credit is the SKU's `wallet_credits_minor` × quantity;
    /// money fields in the body are ignored.
    #[serde(default)]
    pub quantity: crate::http::pipeline::fields::IntIn<1, 1_000_000>,
    /// Picks the program when the merchant runs several in the SKU's currency.
    #[oai(nullable)]
    pub wallet_program_id: Option<UuidText>,
}

impl SkuTopupRequest {
    /// Whole units only: a decimal, a string or null is rejected by the parser (as
    /// `must_be_integer`); a missing quantity is 0 and fails here.
    fn quantity(&self, e: &mut Errors) -> Option<i64> {
        self.quantity
            .check(e, "/quantity")
            .then_some(self.quantity.0)
    }
}

impl Validate for SkuTopupRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        self.pos_order_ref.check(e, "/pos_order_ref");
        identity_credential(e, "/customer", &self.customer.raw);
        self.quantity(e);
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
        optional_uuid(
            e,
            "/context/service_session_id",
            &self.context.service_session_id,
        );
    }
}

/// The credit and both money classes after it.
#[derive(Object, Serialize, Deserialize)]
pub struct TopupResult {
    pub topup_id: String,
    /// `credited`.
    pub status: String,
    pub sku_id: String,
    /// The SKU terms this top-up was credited with.
    pub sku_version: i32,
    pub quantity: i64,
    pub pos_order_ref: String,
    pub wallet_id: String,
    pub wallet_user_id: String,
    /// VERIFIED, or PENDING_PROOF when the credit is held until the customer enrolls.
    pub customer_state: String,
    pub credited_actual_minor: i64,
    pub bonus_minor: i64,
    #[oai(nullable)]
    pub bonus_grant_id: Option<String>,
    /// RELEASED, or LOCKED while the customer has not proven the phone.
    #[oai(nullable)]
    pub bonus_state: Option<String>,
    #[oai(nullable)]
    pub bonus_expires_at: Option<String>,
    pub currency: String,
    pub balance_after: BalanceView,
    pub created_at: String,
}

impl From<TopupOutcome> for TopupResult {
    fn from(o: TopupOutcome) -> Self {
        TopupResult {
            topup_id: o.topup_id,
            status: o.status,
            sku_id: o.sku_id,
            sku_version: o.sku_version,
            quantity: o.quantity,
            pos_order_ref: o.pos_order_ref,
            wallet_id: o.wallet_id,
            wallet_user_id: o.wallet_user_id,
            customer_state: o.customer_state,
            credited_actual_minor: o.credited_actual_minor,
            bonus_minor: o.bonus_minor,
            bonus_grant_id: o.bonus_grant_id,
            bonus_state: o.bonus_state,
            bonus_expires_at: o.bonus_expires_at,
            currency: o.currency,
            balance_after: o.balance_after.into(),
            created_at: o.created_at,
        }
    }
}

pub struct TopupsApi;

#[OpenApi]
impl TopupsApi {
    /// Register or change a SKU
    ///
    /// What one unit of a top-up SKU credits (`wallet_credits_minor`) and its optional
    /// bonus. Registering an existing `sku_id` changes it: the version goes up and later
    /// sales use the new terms; past sales never change.
    ///
    /// Permission: `catalog`.
    #[oai(
        path = "/skus",
        method = "post",
        operation_id = "registerSku",
        tag = "Tag::Topup"
    )]
    async fn register_sku(
        &self,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<SkuRequest>,
    ) -> poem::Result<Reply<SkuView>> {
        auth.0.require(Permission::Catalog)?;
        let p = &auth.0;
        let b = &body.value;
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async move |txn, acting| {
            let bonus = b
                .bonus
                .as_ref()
                .and_then(|x| match (x.amount_minor, x.percent_bps) {
                    (Some(a), _) => Some(Bonus::PerUnit(a.0)),
                    (_, Some(p)) => Some(Bonus::PercentBps(p.0 as i32)),
                    _ => None,
                });
            let (s, _) = topups::register_sku(
                txn,
                p.integration_id,
                acting.merchant_id,
                SkuTerms {
                    sku_id: b.sku_id.to_string(),
                    name: b.name.to_string(),
                    currency: b.currency.to_string(),
                    wallet_credits_minor: *b.wallet_credits_minor,
                    bonus,
                    bonus_expiry_days: b
                        .bonus
                        .as_ref()
                        .and_then(|x| x.expiry_days.map(|d| d.0 as i32)),
                    active: b.active.unwrap_or(true),
                },
                clock.now(),
            )
            .await?;
            Ok(Outcome::new(sku_view(&s)))
        })
        .await
    }

    /// List SKUs
    ///
    /// The merchant's SKUs with their current terms, in the order they were registered.
    /// `merchant_id` is required unless the key acts for exactly one merchant.
    /// Cursor-paginated (`limit` 1–200, default 50; pass `meta.next_cursor` as `cursor`).
    ///
    /// Permission: `catalog`.
    #[oai(
        path = "/skus",
        method = "get",
        operation_id = "listSkus",
        tag = "Tag::Topup"
    )]
    async fn list_skus(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        merchant_id: Query<Option<UuidText>>,
        limit: Query<Option<crate::http::pipeline::fields::PageLimit>>,
        cursor: Query<Option<crate::http::pipeline::fields::Cursor>>,
    ) -> poem::Result<Reply<Vec<SkuView>>> {
        auth.0.require(Permission::Catalog)?;
        let st = state.0;
        let mut e = Errors::default();
        let limit = crate::http::pipeline::fields::PageLimit::resolve(limit.0, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("sku", &cursor.0)?;
        let merchant = crate::http::customers::merchant_of(st, &auth.0, &merchant_id.0).await?;
        let (rows, more) = topups::list_skus(&st.db, merchant, after, limit).await?;
        let page = crate::http::pipeline::cursor::page("sku", &rows, more, |s| s.id);
        Ok(Reply::page(
            &rows.iter().map(sku_view).collect::<Vec<_>>(),
            &page,
        ))
    }

    /// Top up by SKU sale
    ///
    /// Credits the customer's wallet with the SKU's `wallet_credits_minor` × `quantity` as
    /// actual money and, in the same transaction, accrues the SKU's bonus as a
    /// SKU_TOPUP_BONUS grant: RELEASED for a VERIFIED customer, LOCKED (and the credit
    /// held in a PENDING_PROOF proto-wallet, created if absent) otherwise. Idempotent on
    /// the Idempotency-Key and on `pos_order_ref`: concurrent or repeated reports of one
    /// order credit once and all get the first report's result; the same order reported
    /// for another sale is VALIDATION_ERROR. Another tenant's SKU is NOT_FOUND.
    #[oai(
        path = "/topup/sku/:sku_id",
        method = "post",
        operation_id = "topupSku",
        tag = "Tag::Topup"
    )]
    async fn topup_sku(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        sku_id: Path<crate::http::pipeline::fields::Text<1, 64>>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<SkuTopupRequest>,
    ) -> poem::Result<Reply<TopupResult>> {
        let st = state.0.clone();
        let p = &auth.0;
        let b = &body.value;
        let mut e = Errors::default();
        sku_id.0.check(&mut e, "path:sku_id");
        let presented = identity_credential(&mut e, "/customer", &b.customer.raw);
        let quantity = b.quantity(&mut e);
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        let session = optional_uuid(
            &mut e,
            "/context/service_session_id",
            &b.context.service_session_id,
        );
        e.finish()?;
        let presented = presented.ok_or_else(|| ApiError::internal("validated customer"))?;
        let sku = sku_id.0.clone();
        let window = chrono::Duration::seconds(st.config.enrollment_window_secs as i64);
        let shared = state.0;
        let guarded = async move |acting: &Acting| presented.guarded(shared, p, acting).await;
        key.run_prepared(
            &auth.0,
            &body,
            guarded,
            async move |txn, acting, customer| {
                let who = in_context(acting, &b.context);
                let o = topups::topup_sku(
                    txn,
                    &st.sealer,
                    &who,
                    window,
                    SkuTopup {
                        sku_id: sku.into(),
                        pos_order_ref: b.pos_order_ref.to_string(),
                        customer,
                        quantity: quantity.unwrap_or(1),
                        wallet_program_id: program,
                        service_session_id: session,
                    },
                    who.now(),
                )
                .await?;
                Ok(Outcome::new(TopupResult::from(o)))
            },
        )
        .await
    }
}
