//! The reload bonus (`/topup/reload-bonus/config`): tiers of bonus credit a settlement
//! top-up earns, by amount, under a budget. An incentive, configured here; applied when a
//! settlement is confirmed.
use crate::http::pipeline::fields::CurrencyCode;
use crate::http::pipeline::fields::UuidText;
use crate::http::pipeline::fields::{
    AmountMinor, IntIn, List,
    alternatives::{Alternatives, Branch},
};
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Query};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::incentives::program_and_budget;
use crate::http::{
    customers::merchant_of,
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, optional_uuid, path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        incentives::reload_bonus::{self, Config, NewConfig, Tier},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

// --- reload bonus ------------------------------------------------------------------------

/// One bonus band: top-ups from `min_amount_minor` to `max_amount_minor` (inclusive; null
/// means no upper end) earn exactly one of a fixed `bonus_minor` or `bonus_percent_bps` of
/// the amount (rounded down).
#[derive(Object, Deserialize, Serialize, Debug, Clone)]
pub struct TierBody {
    #[serde(default)]
    pub min_amount_minor: AmountMinor,
    /// At least `min_amount_minor`.
    #[oai(nullable)]
    pub max_amount_minor: Option<AmountMinor>,
    #[oai(nullable)]
    pub bonus_minor: Option<AmountMinor>,
    /// Basis points of the top-up (1000 = 10 %), 1 to 10000.
    #[oai(nullable)]
    pub bonus_percent_bps: Option<IntIn<1, 10_000>>,
}

/// A band's bonus is a fixed amount or a share of the top-up, never both.
pub const TIER_BONUS: Alternatives = Alternatives {
    schema: "TierBody",
    branches: &[
        Branch {
            given: &["bonus_minor"],
            absent: &["bonus_percent_bps"],
        },
        Branch {
            given: &["bonus_percent_bps"],
            absent: &["bonus_minor"],
        },
    ],
    field: "",
    issue: "exactly_one",
    message: "give exactly one of bonus_minor or bonus_percent_bps",
};

impl TierBody {
    fn tier(&self) -> Tier {
        Tier {
            min_amount_minor: self.min_amount_minor.0,
            max_amount_minor: self.max_amount_minor.map(|m| m.0),
            bonus_minor: self.bonus_minor.map(|m| m.0),
            bonus_percent_bps: self.bonus_percent_bps.map(|b| b.0 as i32),
        }
    }

    fn from_tier(t: &Tier) -> TierBody {
        TierBody {
            min_amount_minor: AmountMinor(t.min_amount_minor),
            max_amount_minor: t.max_amount_minor.map(AmountMinor),
            bonus_minor: t.bonus_minor.map(AmountMinor),
            bonus_percent_bps: t.bonus_percent_bps.map(|b| IntIn(b.into())),
        }
    }

    fn validate(&self, e: &mut Errors, at: &str) {
        self.min_amount_minor
            .check(e, &format!("{at}/min_amount_minor"));
        if let Some(max) = &self.max_amount_minor
            && max.check(e, &format!("{at}/max_amount_minor"))
            && max.0 < self.min_amount_minor.0
        {
            e.push(
                format!("{at}/max_amount_minor"),
                "invalid_range",
                "must be at least min_amount_minor",
            );
        }
        TIER_BONUS.check(e, at, |m| match m {
            "bonus_minor" => self.bonus_minor.is_some(),
            _ => self.bonus_percent_bps.is_some(),
        });
        if let Some(m) = &self.bonus_minor {
            m.check(e, &format!("{at}/bonus_minor"));
        }
        if let Some(b) = &self.bonus_percent_bps {
            b.check(e, &format!("{at}/bonus_percent_bps"));
        }
    }
}

/// Set a program's reload-bonus tiers (a new version; earlier top-ups keep theirs).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ReloadBonusConfigRequest {
    /// Optional here: omitted, nothing is checked; given, it must be valid.
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    /// The program the tiers govern.
    #[serde(default)]
    pub wallet_program_id: UuidText,
    /// Exactly 3 letters: the program's currency.
    #[serde(default)]
    pub currency: CurrencyCode,
    /// 1 to 20 non-overlapping bands.
    #[serde(default)]
    pub tiers: List<TierBody, 1, 20>,
    /// Lifetime of an accrued bonus grant in days, 1 to 3650 (default 365).
    #[oai(nullable)]
    pub expiry_days: Option<IntIn<1, 3650>>,
    /// A campaign budget that caps what the bonuses issue in total (beta).
    #[oai(nullable)]
    pub budget_id: Option<UuidText>,
}

impl Validate for ReloadBonusConfigRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        validate::uuid(e, "/wallet_program_id", &self.wallet_program_id);
        validate::currency(e, "/currency", &self.currency);
        self.tiers.check(e, "/tiers");
        let before = e.0.len();
        for (i, t) in self.tiers.iter().enumerate() {
            t.validate(e, &format!("/tiers/{i}"));
        }
        if e.0.len() == before {
            let tiers: Vec<Tier> = self.tiers.iter().map(TierBody::tier).collect();
            reload_bonus::check_tiers(e, &tiers);
        }
        if let Some(d) = &self.expiry_days {
            d.check(e, "/expiry_days");
        }
        optional_uuid(e, "/budget_id", &self.budget_id);
    }
}

/// A program's reload-bonus config as stored.
#[derive(Object, Serialize)]
pub struct ReloadBonusConfigView {
    pub config_id: String,
    pub wallet_program_id: String,
    /// Counts changes; a confirmed top-up reports the version it accrued under.
    pub version: i32,
    pub currency: String,
    pub tiers: Vec<TierBody>,
    /// Null: the default lifetime, 365 days.
    #[oai(nullable)]
    pub expiry_days: Option<i32>,
    #[oai(nullable)]
    pub budget_id: Option<String>,
    pub merchant_id: String,
    /// When this version came into force.
    pub created_at: String,
}

pub(super) fn config_view(c: &Config) -> ReloadBonusConfigView {
    ReloadBonusConfigView {
        config_id: c.id.to_string(),
        wallet_program_id: c.wallet_program_id.to_string(),
        version: c.version,
        currency: c.currency.clone(),
        tiers: c.tiers.iter().map(TierBody::from_tier).collect(),
        expiry_days: c.expiry_days,
        budget_id: c.budget_id.map(|b| b.to_string()),
        merchant_id: c.merchant_id.to_string(),
        created_at: ts(c.created_at),
    }
}

pub struct ReloadBonusApi;

#[OpenApi(tag = "Tag::Topup")]
impl ReloadBonusApi {
    /// Set reload-bonus tiers
    ///
    /// Stores a new version of the program's reload-bonus config: 1 to 20 non-overlapping
    /// amount bands (an overlap is VALIDATION_ERROR naming both tiers), the currency
    /// (exactly the program's), and the bonus lifetime `expiry_days` (at least 1; drives the
    /// grant's `expires_at`). Forward-looking only: a top-up confirmed earlier keeps the
    /// bonus it got; later ones use this version.
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/topup/reload-bonus/config",
        method = "post",
        operation_id = "setReloadBonusConfig"
    )]
    async fn set_config(
        &self,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<ReloadBonusConfigRequest>,
    ) -> poem::Result<Reply<ReloadBonusConfigView>> {
        auth.0.require(Permission::Incentives)?;
        let p = &auth.0;
        let b = &body.value;
        let (program, budget) = program_and_budget(&b.wallet_program_id, &b.budget_id)?;
        let clock = auth.0.clock();
        key.run(&auth.0, &body, async move |txn, acting| {
            let c = reload_bonus::configure(
                txn,
                p.integration_id,
                acting.merchant_id,
                NewConfig {
                    wallet_program_id: program,
                    currency: b.currency.to_string(),
                    tiers: b.tiers.iter().map(TierBody::tier).collect(),
                    expiry_days: b.expiry_days.map(|d| d.0 as i32),
                    budget_id: budget,
                },
                clock.now(),
            )
            .await?;
            Ok(Outcome::new(config_view(&c)))
        })
        .await
    }

    /// Get reload-bonus tiers
    ///
    /// The config in force for the program (NOT_FOUND when none was set).
    ///
    /// Permission: `incentives`.
    #[oai(
        path = "/topup/reload-bonus/config",
        method = "get",
        operation_id = "getReloadBonusConfig"
    )]
    async fn get_config(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        wallet_program_id: Query<crate::http::pipeline::fields::UuidText>,
        merchant_id: Query<Option<UuidText>>,
    ) -> poem::Result<Reply<ReloadBonusConfigView>> {
        auth.0.require(Permission::Incentives)?;
        let st = state.0;
        let program = path_uuid("query:wallet_program_id", &wallet_program_id.0)?;
        let merchant = merchant_of(st, &auth.0, &merchant_id.0).await?;
        let c = reload_bonus::current(&st.db, merchant, program)
            .await?
            .ok_or_else(|| ApiError::not_found("Reload-bonus config"))?;
        Ok(Reply::ok(&config_view(&c)))
    }
}
