//! Operator tools for wallets: register a customer's wallet, adjust its money by hand,
//! issue a promotional grant, and prove the ledger agrees with every balance. Money changes
//! take an Idempotency-Key like every partner mutation and are posted through the ledger.
use crate::http::pipeline::fields::UuidText;
use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi,
    param::{Path, Query},
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::http::pipeline::common::path_uuid;
use crate::http::{
    customers::balance::BalanceView,
    openapi::tags::Tag,
    operator::OperatorAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        customers::wallets::{self, Adjustment, WalletRecord},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
    store,
};

pub struct OperatorWalletsApi;

/// A required reason of 1 to 500 characters (an audited correction says why).
pub(in crate::http) type Reason = crate::http::pipeline::fields::Text<1, 500>;

pub(in crate::http) fn reason(e: &mut Errors, r: &Reason) {
    r.check(e, "/reason");
}

/// Register a customer's wallet at a merchant.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ImportWalletRequest {
    #[serde(default)]
    pub merchant_id: crate::http::pipeline::fields::UuidText,
    /// E.164.
    #[serde(default)]
    pub phone: crate::http::pipeline::fields::Phone,
    /// Default: the merchant's only active program.
    #[oai(nullable)]
    pub wallet_program_id: Option<crate::http::pipeline::fields::UuidText>,
    /// `VERIFIED` (default) or `PENDING_PROOF`; applies when the identity is new.
    #[oai(nullable)]
    pub state: Option<
        crate::http::pipeline::fields::Field<
            crate::http::pipeline::fields::OneOf<
                crate::http::pipeline::fields::ImportedIdentityStates,
            >,
        >,
    >,
    #[serde(default)]
    pub reason: Reason,
}

impl Validate for ImportWalletRequest {
    fn validate(&self, e: &mut Errors) {
        validate::uuid(e, "/merchant_id", &self.merchant_id);
        if validate::normalize_phone(&self.phone).is_none() {
            e.push("/phone", "invalid_phone", "must be an E.164 phone number");
        }
        if let Some(p) = &self.wallet_program_id {
            validate::uuid(e, "/wallet_program_id", p);
        }
        if let Some(s) = &self.state {
            s.check(e, "/state");
        }
        reason(e, &self.reason);
    }
}

/// A wallet with its owner and balance.
#[derive(Object, Serialize)]
pub struct OperatorWallet {
    pub wallet_id: String,
    pub wallet_user_id: String,
    pub merchant_id: String,
    pub wallet_program_id: String,
    pub phone: String,
    /// PENDING_PROOF or VERIFIED.
    pub state: String,
    pub balance: BalanceView,
}

fn view(r: WalletRecord) -> OperatorWallet {
    OperatorWallet {
        wallet_id: r.wallet.id.to_string(),
        wallet_user_id: r.identity.id.to_string(),
        merchant_id: r.wallet.merchant_id.to_string(),
        wallet_program_id: r.wallet.wallet_program_id.to_string(),
        phone: r.identity.phone,
        state: r.identity.state.as_str().to_string(),
        balance: r.balance.into(),
    }
}

/// A manual change to a wallet's actual money.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct AdjustmentRequest {
    /// `credit` or `debit`.
    #[serde(default)]
    pub direction: crate::http::pipeline::fields::Field<
        crate::http::pipeline::fields::OneOf<crate::http::pipeline::fields::AdjustmentDirections>,
    >,
    /// Minimum 1.
    #[serde(default)]
    pub amount_minor: crate::http::pipeline::fields::AmountMinor,
    /// Must be the wallet's currency.
    #[serde(default)]
    pub currency: crate::http::pipeline::fields::CurrencyCode,
    #[serde(default)]
    pub reason: Reason,
}

impl Validate for AdjustmentRequest {
    fn validate(&self, e: &mut Errors) {
        self.direction.check(e, "/direction");
        self.amount_minor.check(e, "/amount_minor");
        validate::currency(e, "/currency", &self.currency);
        reason(e, &self.reason);
    }
}

/// A promotional grant issued by hand (goodwill, migration of an older program's credit).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct GrantRequest {
    #[serde(default)]
    pub amount_minor: crate::http::pipeline::fields::AmountMinor,
    #[serde(default)]
    pub currency: crate::http::pipeline::fields::CurrencyCode,
    #[serde(default)]
    pub source: crate::http::pipeline::fields::Field<
        crate::http::pipeline::fields::OneOf<crate::http::pipeline::fields::GrantSources>,
    >,
    #[serde(default)]
    pub state: crate::http::pipeline::fields::Field<
        crate::http::pipeline::fields::OneOf<crate::http::pipeline::fields::NewGrantStates>,
    >,
    /// In the future.
    #[serde(default)]
    pub expires_at: crate::http::pipeline::fields::DateTimeText,
    #[serde(default)]
    pub reason: Reason,
}

impl GrantRequest {
    fn expiry(&self, e: &mut Errors) -> Option<DateTime<Utc>> {
        let at = validate::rfc3339(e, "/expires_at", &self.expires_at)?;
        validate::future(e, "/expires_at", at, Utc::now()).then_some(at)
    }
}

impl Validate for GrantRequest {
    fn validate(&self, e: &mut Errors) {
        self.amount_minor.check(e, "/amount_minor");
        validate::currency(e, "/currency", &self.currency);
        self.source.check(e, "/source");
        self.state.check(e, "/state");
        self.expiry(e);
        reason(e, &self.reason);
    }
}

/// Whether the ledger and the stored balances agree.
#[derive(Object, Serialize)]
pub struct LedgerCheck {
    pub consistent: bool,
    pub postings: i64,
    pub entries: i64,
    /// Postings whose entries do not sum to zero.
    pub unbalanced_postings: Vec<String>,
    /// `{id, stored_minor, ledger_minor}` of wallets whose balance differs from the ledger.
    pub wallet_mismatches: Vec<serde_json::Value>,
    /// The same for promotional grants.
    pub grant_mismatches: Vec<serde_json::Value>,
    /// The same for wallets' pending top-ups.
    pub pending_mismatches: Vec<serde_json::Value>,
}

pub fn ledger_check_view(r: store::ledger::Report) -> LedgerCheck {
    let mismatch = |m: &store::ledger::Mismatch| serde_json::to_value(m).unwrap_or_default();
    LedgerCheck {
        consistent: r.is_consistent(),
        postings: r.postings,
        entries: r.entries,
        unbalanced_postings: r
            .unbalanced_postings
            .iter()
            .map(|u| u.to_string())
            .collect(),
        wallet_mismatches: r.wallet_mismatches.iter().map(mismatch).collect(),
        grant_mismatches: r.grant_mismatches.iter().map(mismatch).collect(),
        pending_mismatches: r.pending_mismatches.iter().map(mismatch).collect(),
    }
}

#[OpenApi(tag = "Tag::Platform")]
impl OperatorWalletsApi {
    /// Register a customer wallet (operators)
    ///
    /// Creates the customer's identity at the merchant (by phone) if new, and a wallet in
    /// the program. Returns the existing wallet when there is one. Audited.
    #[oai(
        path = "/operator/wallets",
        method = "post",
        operation_id = "operatorImportWallet"
    )]
    async fn import(
        &self,
        state: Data<&AppState>,
        auth: OperatorAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<ImportWalletRequest>,
    ) -> poem::Result<Reply<OperatorWallet>> {
        let b = &body.value;
        let op = auth.0.clone();
        let window = chrono::Duration::seconds(state.0.config.enrollment_window_secs as i64);
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let merchant = Uuid::parse_str(&b.merchant_id).map_err(ApiError::internal)?;
            let phone = validate::normalize_phone(&b.phone).unwrap_or_default();
            let program = b
                .wallet_program_id
                .as_deref()
                .and_then(|p| Uuid::parse_str(p).ok());
            let state = b.state.as_deref().unwrap_or(wallets::VERIFIED.as_str());
            let asked = wallets::Import {
                merchant_id: merchant,
                phone: &phone,
                program_id: program,
                state,
                reason: &b.reason,
            };
            let r = wallets::import(txn, &op, asked, window).await?;
            Ok(Outcome::new(view(r)))
        })
        .await
    }

    /// Read a wallet (operators)
    #[oai(
        path = "/operator/wallets/:wallet_id",
        method = "get",
        operation_id = "operatorGetWallet"
    )]
    async fn get(
        &self,
        state: Data<&AppState>,
        _auth: OperatorAuth,
        wallet_id: Path<UuidText>,
    ) -> poem::Result<Reply<OperatorWallet>> {
        let id = path_uuid("path:walletId", &wallet_id.0)?;
        let r = wallets::find_for_operator(&state.0.db, id).await?;
        Ok(Reply::ok(&view(r)))
    }

    /// Adjust a wallet's actual money (operators)
    ///
    /// The operators' manual correction: a credit or debit of actual money, posted through
    /// the ledger against the merchant's adjustment account, with a wallet.balance_changed
    /// event. A debit beyond the balance is INSUFFICIENT_FUNDS. Audited.
    #[oai(
        path = "/operator/wallets/:wallet_id/adjustments",
        method = "post",
        operation_id = "operatorAdjustWallet"
    )]
    async fn adjust(
        &self,
        auth: OperatorAuth,
        wallet_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<AdjustmentRequest>,
    ) -> poem::Result<Reply<OperatorWallet>> {
        let id = path_uuid("path:walletId", &wallet_id.0)?;
        let b = &body.value;
        let op = auth.0.clone();
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let signed = if b.direction.as_str() == "debit" {
                -*b.amount_minor
            } else {
                *b.amount_minor
            };
            let r = wallets::adjust(
                txn,
                &op,
                id,
                &b.currency,
                Adjustment::Actual {
                    amount_minor: signed,
                },
                &b.reason,
            )
            .await?;
            Ok(Outcome::new(view(r)))
        })
        .await
    }

    /// Issue a promotional grant (operators)
    ///
    /// Posted through the ledger from the merchant's promotion funding account. Audited.
    #[oai(
        path = "/operator/wallets/:wallet_id/grants",
        method = "post",
        operation_id = "operatorIssueGrant"
    )]
    async fn grant(
        &self,
        auth: OperatorAuth,
        wallet_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<GrantRequest>,
    ) -> poem::Result<Reply<OperatorWallet>> {
        let id = path_uuid("path:walletId", &wallet_id.0)?;
        let b = &body.value;
        let op = auth.0.clone();
        let mut e = Errors::default();
        let expires_at = b.expiry(&mut e).unwrap_or_else(Utc::now);
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let r = wallets::adjust(
                txn,
                &op,
                id,
                &b.currency,
                Adjustment::Grant {
                    amount_minor: *b.amount_minor,
                    source: b.source.to_string(),
                    state: b.state.to_string(),
                    expires_at,
                },
                &b.reason,
            )
            .await?;
            Ok(Outcome::new(view(r)))
        })
        .await
    }

    /// Check the ledger (operators)
    ///
    /// Recomputes every wallet and grant balance from the ledger entries and checks every
    /// posting balances; for one merchant or all. Each run is recorded in the audit log
    /// (`ledger.check`), which the console's health page reads.
    #[oai(
        path = "/operator/ledger/check",
        method = "get",
        operation_id = "operatorCheckLedger"
    )]
    async fn check(
        &self,
        state: Data<&AppState>,
        auth: OperatorAuth,
        merchant_id: Query<Option<UuidText>>,
    ) -> poem::Result<Reply<LedgerCheck>> {
        let mut e = Errors::default();
        let merchant = merchant_id
            .0
            .as_deref()
            .and_then(|m| validate::uuid(&mut e, "query:merchant_id", m));
        e.finish()?;
        let r =
            crate::domain::operators::check_ledger(&state.0.db, &auth.0.actor(), merchant, false)
                .await?;
        Ok(Reply::ok(&ledger_check_view(r)))
    }
}
