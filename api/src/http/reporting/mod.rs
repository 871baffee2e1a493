//! Stored-value accounting for a merchant's finance team (x-api-key, permission
//! `reporting`): the liability at an instant, and report runs (`reports`).
//! docs/accounting.md explains the figures.
pub mod policy;
pub mod reports;

use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::Serialize;

use crate::domain::credentials::Permission;
use crate::domain::ledger::liability::{self, Liability};
use crate::domain::{transactions, validate::Errors};
use crate::http::pipeline::fields::{CurrencyCode, DateTimeText, UuidText};
use crate::http::pipeline::query_group::{Grouped, query_group};
use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::common::{optional_uuid, path_uuid, ts},
    pipeline::reply::Reply,
};
use crate::{domain::validate, error::ApiError, state::AppState};

query_group! {
    /// What liability to read.
    pub struct LiabilityQuery {
        /// The instant (RFC 3339; default now, by the integration's clock). Not in the future.
        as_of: Option<DateTimeText> = "as_of",
        /// One merchant of the integration (default: every merchant the key may read).
        merchant_id: Option<UuidText> = "merchant_id",
        /// One currency (default: every currency held).
        currency: Option<CurrencyCode> = "currency",
    }
}

/// One merchant's customer value in one currency at the instant. Every figure is the sum
/// of the merchant's ledger entries on accounts of that class up to and including `as_of`.
#[derive(Object, Serialize)]
pub struct MerchantLiability {
    pub merchant_id: String,
    pub currency: String,
    /// Customer-paid value in wallets.
    pub actual_minor: i64,
    /// Promotional credit customers can spend.
    pub promo_released_minor: i64,
    /// Promotional credit waiting for customers' verification.
    pub promo_locked_minor: i64,
    /// Money of lapsed enrollments the merchant holds for the customer.
    pub escrow_minor: i64,
    /// The liability: actual + promo_released + promo_locked + escrow.
    pub liability_minor: i64,
    /// Settlement top-ups requested and not yet settled: shown, not part of the liability.
    pub pending_topup_minor: i64,
    /// Wallets whose liability is not zero.
    pub wallets_holding: i64,
}

impl From<&Liability> for MerchantLiability {
    fn from(l: &Liability) -> Self {
        MerchantLiability {
            merchant_id: l.merchant_id.to_string(),
            currency: l.currency.clone(),
            actual_minor: l.actual_minor,
            promo_released_minor: l.promo_released_minor,
            promo_locked_minor: l.promo_locked_minor,
            escrow_minor: l.escrow_minor,
            liability_minor: l.total_minor(),
            pending_topup_minor: l.pending_topup_minor,
            wallets_holding: l.wallets_holding,
        }
    }
}

/// The liability at one instant.
#[derive(Object, Serialize)]
pub struct LiabilityView {
    /// The instant the figures are at.
    pub as_of: String,
    /// One line per merchant and currency that has held customer value, by merchant id
    /// then currency.
    pub merchants: Vec<MerchantLiability>,
}

pub struct ReportingApi;

#[OpenApi(tag = "Tag::Reporting")]
impl ReportingApi {
    /// Read the liability at an instant
    ///
    /// What the integration's merchants owe their customers at `as_of` (default now; any
    /// past instant, as the ledger is never pruned; a future one is VALIDATION_ERROR), per
    /// merchant and currency and by class: `actual`, `promo_released`, `promo_locked`,
    /// `escrow` (their sum is `liability_minor`), and `pending_topup` beside it, with the
    /// number of wallets holding any. It equals the sum of the merchant's wallet balances at
    /// that instant, to the minor unit. A sandbox integration's instants are on its test
    /// clock. `merchant_id` narrows to one merchant; one the key cannot read gives an empty
    /// list, as a merchant without wallets does. Brand and branch keys are FORBIDDEN
    /// (liability is held per merchant); another integration in the path is FORBIDDEN.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/liability",
        method = "get",
        operation_id = "getLiability"
    )]
    async fn liability(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        query: Grouped<LiabilityQuery>,
    ) -> poem::Result<Reply<LiabilityView>> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        let LiabilityQuery {
            as_of,
            merchant_id,
            currency,
        } = query.0;
        let mut e = Errors::default();
        let now = auth.0.clock().now();
        let as_of = match as_of.as_deref() {
            Some(v) => validate::rfc3339(&mut e, "query:as_of", v),
            None => Some(now),
        };
        if let Some(at) = as_of
            && at > now
        {
            e.push("query:as_of", "in_future", "must not be after now");
        }
        let merchant = optional_uuid(&mut e, "query:merchant_id", &merchant_id);
        if let Some(c) = &currency {
            c.check(&mut e, "query:currency");
        }
        e.finish()?;
        let as_of = as_of.ok_or_else(|| ApiError::internal("as_of checked above"))?;
        let read = state.0.lagging().await;
        let merchants = liability::readable_merchants(&read.db, &auth.0, merchant).await?;
        let lines = liability::at(&read.db, &merchants, currency.as_deref(), as_of).await?;
        let view = LiabilityView {
            as_of: ts(as_of),
            merchants: lines.iter().map(MerchantLiability::from).collect(),
        };
        Ok(Reply::lagging(&view, read.served))
    }
}
