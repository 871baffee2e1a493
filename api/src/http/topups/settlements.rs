//! Settlement-backed top-ups: settlement ingest (control plane) and top-up confirmation at
//! the till. The reload-bonus tiers a confirmation accrues under are configured in
//! `incentives::reload_bonus`.
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
use crate::http::{
    customers::balance::BalanceView,
    customers::{IdentityCredentialBody, identity_credential, merchant_of},
    openapi::tags::Tag,
    pipeline::auth::{ApiKeyAuth, TerminalJwtAuth},
    pipeline::body::{Documented, JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, in_context, optional_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::{Principal, Scope},
        topups::settlements::{self, Confirm, Confirmed, Report, Settlement},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

// --- settlement ingest -------------------------------------------------------------------

/// A settlement your payment provider reported for a top-up the customer paid.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct SettlementRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The provider's settlement reference, 1 to 128 characters; unique per merchant.
    #[serde(default)]
    pub reference: Text<1, 128>,
    /// What was settled, in minor units (at least 1). It is what the top-up will credit.
    #[serde(default)]
    pub amount_minor: crate::http::pipeline::fields::AmountMinor,
    /// ISO-4217; one of the merchant's program currencies.
    #[serde(default)]
    pub currency: CurrencyCode,
    /// PENDING (the provider is settling), SETTLED or FAILED. A reference moves only from
    /// PENDING to SETTLED or FAILED; reporting the same state again changes nothing.
    #[serde(default)]
    pub state: crate::http::pipeline::fields::Field<
        crate::http::pipeline::fields::OneOf<crate::http::pipeline::fields::SettlementStates>,
    >,
    /// The provider's name, up to 64 characters.
    #[oai(nullable)]
    pub provider: Option<Text<1, 64>>,
    /// Why it failed (FAILED only), up to 200 characters.
    #[oai(nullable)]
    pub failure_reason: Option<Text<1, 200>>,
}

impl Validate for SettlementRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.reference.check(e, "/reference");
        self.amount_minor.check(e, "/amount_minor");
        validate::currency(e, "/currency", &self.currency);
        self.state.check(e, "/state");
        if let Some(p) = &self.provider {
            p.check(e, "/provider");
        }
        if let Some(r) = &self.failure_reason {
            if settlements::parse_state(self.state.as_str()) != Some(settlements::FAILED) {
                e.push("/failure_reason", "not_allowed", "only with state FAILED");
            } else {
                r.check(e, "/failure_reason");
            }
        }
    }
}

/// A settlement reference and what became of it.
#[derive(Object, Serialize)]
pub struct SettlementView {
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    /// PENDING, SETTLED or FAILED.
    pub state: String,
    #[oai(nullable)]
    pub provider: Option<String>,
    #[oai(nullable)]
    pub failure_reason: Option<String>,
    /// True once a confirmed top-up used it (a reference credits once).
    pub used: bool,
    /// The top-up that used it.
    #[oai(nullable)]
    pub topup_id: Option<String>,
    pub is_sandbox: bool,
    pub merchant_id: String,
    pub created_at: String,
    pub updated_at: String,
}

fn settlement_view(s: &Settlement) -> SettlementView {
    SettlementView {
        reference: s.reference.clone(),
        amount_minor: s.amount_minor,
        currency: s.currency.clone(),
        state: s.state.as_str().to_string(),
        provider: s.provider.clone(),
        failure_reason: s.failure_reason.clone(),
        used: s.used,
        topup_id: s.topup_id.map(|t| t.to_string()),
        is_sandbox: s.is_sandbox,
        merchant_id: s.merchant_id.to_string(),
        created_at: ts(s.created_at),
        updated_at: ts(s.updated_at),
    }
}

/// Settlement ingest is the merchant's control plane: a key for the whole merchant (or the
/// platform key), never a brand's or a branch's till key.
fn control_plane(p: &Principal) -> Result<(), ApiError> {
    match p.scope {
        Scope::Integration | Scope::Enterprise { .. } => Ok(()),
        _ => Err(ApiError::forbidden(
            "Settlement ingest needs a merchant-wide or platform key, not a brand or branch key.",
        )),
    }
}

// --- confirm -----------------------------------------------------------------------------

/// Confirm a top-up against a settled reference.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ConfirmRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// A SETTLED reference from settlement ingest that no top-up used yet. The amount
    /// comes from the settlement; money fields in the body are ignored.
    #[serde(default)]
    pub settlement_reference: Text<1, 128>,
    /// The customer to credit. A phone the merchant does not know yet gets a PENDING_PROOF
    /// proto-wallet that holds the credit until the customer enrolls.
    #[serde(default)]
    pub customer: Documented<IdentityCredentialBody>,
    /// Picks the program when the merchant runs several in the settlement's currency.
    #[oai(nullable)]
    pub wallet_program_id: Option<crate::http::pipeline::fields::UuidText>,
}

impl Validate for ConfirmRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.settlement_reference.check(e, "/settlement_reference");
        identity_credential(e, "/customer", &self.customer.raw);
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
    }
}

/// The credit, its reload bonus, and both money classes after it.
#[derive(Object, Serialize)]
pub struct ConfirmResult {
    pub topup_id: String,
    /// `credited`; or `pending` when the reference has not settled yet: the amount shows
    /// in `balance_after.pending_topups_minor` and is credited (with the reload bonus in
    /// force then) when the reference is reported SETTLED, dropped when FAILED.
    pub status: String,
    pub settlement_reference: String,
    pub wallet_id: String,
    pub wallet_user_id: String,
    /// VERIFIED, or PENDING_PROOF when the credit is held until the customer enrolls.
    pub customer_state: String,
    /// 0 while `pending`.
    pub credited_actual_minor: i64,
    /// The reload bonus (0 when no tier applies or the config's budget is spent; 0 while
    /// `pending`).
    pub bonus_minor: i64,
    #[oai(nullable)]
    pub bonus_grant_id: Option<String>,
    /// RELEASED, or LOCKED while the customer has not proven the phone.
    #[oai(nullable)]
    pub bonus_state: Option<String>,
    #[oai(nullable)]
    pub bonus_expires_at: Option<String>,
    /// The reload-bonus config version in force at confirmation (null: none configured).
    #[oai(nullable)]
    pub bonus_config_version: Option<i32>,
    pub currency: String,
    pub balance_after: BalanceView,
    pub created_at: String,
}

impl From<Confirmed> for ConfirmResult {
    fn from(o: Confirmed) -> Self {
        ConfirmResult {
            topup_id: o.topup_id,
            status: o.status,
            settlement_reference: o.settlement_reference,
            wallet_id: o.wallet_id,
            wallet_user_id: o.wallet_user_id,
            customer_state: o.customer_state,
            credited_actual_minor: o.credited_actual_minor,
            bonus_minor: o.bonus_minor,
            bonus_grant_id: o.bonus_grant_id,
            bonus_state: o.bonus_state,
            bonus_expires_at: o.bonus_expires_at,
            bonus_config_version: o.bonus_config_version,
            currency: o.currency,
            balance_after: o.balance_after.into(),
            created_at: o.created_at,
        }
    }
}

pub struct SettlementsApi;

#[OpenApi(tag = "Tag::Topup")]
impl SettlementsApi {
    /// Ingest a settlement
    ///
    /// The control plane reports what the payment provider settled for a customer's
    /// top-up: first as PENDING or straight away as SETTLED or FAILED, later moving a
    /// PENDING reference on. The first report of a reference fires topup.requested, a
    /// failure topup.failed. A top-up the till requested against a PENDING reference is
    /// credited by the report that settles it (topup.confirmed) or dropped by the one that
    /// fails it, in the same transaction. A reference's amount and currency never change. Sandbox keys
    /// create sandbox references (no provider is called); a production key never confirms
    /// against one. Needs a merchant-wide or platform key (a brand or branch key is
    /// FORBIDDEN).
    ///
    /// Permission: `settlements`.
    #[oai(
        path = "/topup/settlements",
        method = "post",
        operation_id = "ingestSettlement"
    )]
    async fn ingest(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<SettlementRequest>,
    ) -> poem::Result<Reply<SettlementView>> {
        auth.0.require(Permission::Settlements)?;
        control_plane(&auth.0)?;
        let b = &body.value;
        let window = chrono::Duration::seconds(state.0.config.enrollment_window_secs as i64);
        key.run(&auth.0, &body, async move |txn, acting| {
            let who = in_context(acting, &b.context);
            let s = settlements::ingest(
                txn,
                &who,
                window,
                Report {
                    reference: b.reference.to_string(),
                    amount_minor: *b.amount_minor,
                    currency: b.currency.to_string(),
                    state: b.state.to_string(),
                    provider: b.provider.clone().map(String::from),
                    failure_reason: b.failure_reason.clone().map(String::from),
                },
                who.now(),
            )
            .await?;
            Ok(Outcome::new(settlement_view(&s)))
        })
        .await
    }

    /// Get a settlement
    ///
    /// A settlement reference's state and whether a top-up used it. `merchant_id` is
    /// required unless the key acts for exactly one merchant.
    ///
    /// Permission: `settlements`.
    #[oai(
        path = "/topup/settlements/:reference",
        method = "get",
        operation_id = "getSettlement"
    )]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        reference: Path<crate::http::pipeline::fields::Text<1, 128>>,
        merchant_id: Query<Option<UuidText>>,
    ) -> poem::Result<Reply<SettlementView>> {
        auth.0.require(Permission::Settlements)?;
        let st = state.0;
        control_plane(&auth.0)?;
        let merchant = merchant_of(st, &auth.0, &merchant_id.0).await?;
        let s = settlements::show(&st.db, auth.0.integration_id, merchant, &reference.0).await?;
        Ok(Reply::ok(&settlement_view(&s)))
    }

    /// Confirm a top-up
    ///
    /// Credits the customer's actual (cashable) money with the amount of one SETTLED
    /// settlement reference and, in the same transaction, accrues the reload bonus of the
    /// tier the amount falls in under the config in force now (RELOAD_BONUS grant, RELEASED
    /// for a VERIFIED customer, else LOCKED with the credit held in a PENDING_PROOF
    /// proto-wallet). A reference credits once: an unknown reference is NOT_FOUND; one
    /// FAILED or already used is VALIDATION_ERROR with the issue `settlement_failed` or
    /// `settlement_already_used`. Fires topup.confirmed (wallet_id, credited_actual_minor,
    /// currency). Against a reference still PENDING the top-up is requested: `status`
    /// `pending`, the amount in the wallet's `pending_topups_minor` until the reference is
    /// reported SETTLED (then credited, with topup.confirmed) or FAILED (then dropped, with
    /// topup.failed naming the top-up and wallet).
    #[oai(
        path = "/topup/confirm",
        method = "post",
        operation_id = "confirmTopup"
    )]
    async fn confirm(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<ConfirmRequest>,
    ) -> poem::Result<Reply<ConfirmResult>> {
        let st = state.0.clone();
        let p = &auth.0;
        let b = &body.value;
        let mut e = Errors::default();
        let presented = identity_credential(&mut e, "/customer", &b.customer.raw);
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        e.finish()?;
        let presented = presented.ok_or_else(|| ApiError::internal("validated customer"))?;
        let window = chrono::Duration::seconds(st.config.enrollment_window_secs as i64);
        let shared = state.0;
        let guarded = async move |acting: &Acting| presented.guarded(shared, p, acting).await;
        key.run_prepared(
            &auth.0,
            &body,
            guarded,
            async move |txn, acting, customer| {
                let who = in_context(acting, &b.context);
                let o = settlements::confirm(
                    txn,
                    &st.sealer,
                    &who,
                    window,
                    Confirm {
                        settlement_reference: b.settlement_reference.to_string(),
                        customer,
                        wallet_program_id: program,
                    },
                    who.now(),
                )
                .await?;
                Ok(Outcome::new(ConfirmResult::from(o)))
            },
        )
        .await
    }
}
