//! The service's own staff: operator credentials and the actions they take on tenants.
//! Every action is written to the audit log in the transaction that performs it. Signing
//! in (and its failure budget) is `sign_in`; console sessions and enabling or disabling an
//! operator are `sessions`.
pub mod dead_letters;
pub mod sessions;
pub mod sign_in;

use crate::store::Db;
use entities::{integration::IntegrationStatus, operator_audit};
use sea_orm::ConnectionTrait;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    domain::credentials::{api_key, authenticate::KeyAuth, standing::Standing},
    domain::sandbox::clock::Clock,
    error::ApiError,
    store,
};

/// An authenticated operator.
#[derive(Clone, Debug)]
pub struct Operator {
    pub id: Uuid,
    pub name: String,
}

impl Operator {
    /// How the audit log names this operator.
    pub fn actor(&self) -> String {
        format!("operator:{}:{}", self.id, self.name)
    }
}

#[derive(Debug, Serialize)]
pub struct OperatorCreated {
    pub operator_id: Uuid,
    pub name: String,
    /// Shown once.
    pub operator_key: String,
}

pub async fn create(db: &Db, name: &str, bcrypt_cost: u32) -> Result<OperatorCreated, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(ApiError::field(
            "--name",
            "invalid",
            "1 to 200 printable characters",
        ));
    }
    let key = api_key::mint_with(api_key::OPERATOR_PREFIX, "op");
    let raw = key.raw.clone();
    let hash = tokio::task::spawn_blocking(move || api_key::hash(&raw, bcrypt_cost))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    let id = Uuid::now_v7();
    let txn = store::begin(db).await?;
    store::credentials::operators::insert(
        &txn,
        store::credentials::operators::NewOperator {
            id,
            name,
            key_prefix: &key.key_prefix,
            key_hash: hash,
            key_last_four: &key.key_last_four,
        },
    )
    .await?;
    audit(
        &txn,
        "cli",
        "operator.create",
        "operator",
        Some(id.to_string()),
        None,
        json!({"name": name}),
    )
    .await?;
    txn.commit().await?;
    Ok(OperatorCreated {
        operator_id: id,
        name: name.to_string(),
        operator_key: key.raw,
    })
}

pub async fn audit<C: ConnectionTrait>(
    c: &C,
    actor: &str,
    action: &str,
    target_type: &str,
    target_id: Option<String>,
    reason: Option<String>,
    details: Value,
) -> Result<(), ApiError> {
    store::credentials::operators::insert_audit(
        c,
        store::credentials::operators::AuditEntry {
            actor,
            action,
            target_type,
            target_id,
            reason,
            details,
        },
    )
    .await?;
    Ok(())
}

/// What an operator does to an integration's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegrationChange {
    Suspend,
    Reactivate,
}

impl IntegrationChange {
    fn target(self) -> IntegrationStatus {
        match self {
            Self::Suspend => IntegrationStatus::Suspended,
            Self::Reactivate => IntegrationStatus::Active,
        }
    }

    fn action(self) -> &'static str {
        match self {
            Self::Suspend => "integration.suspend",
            Self::Reactivate => "integration.reactivate",
        }
    }
}

/// How a change of standing ended, for [`settle_status_change`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// This request's transaction committed.
    Committed,
    /// An earlier request with the same Idempotency-Key answered; nothing ran now.
    Replayed,
    /// Nothing committed.
    Failed,
}

/// Before a suspension's transaction opens (never for a replay): publishes the status for
/// terminal tokens and takes every key of the integration out of every replica's cache, so
/// neither its keys nor the tokens minted from them work on the next request. The key
/// caches' tombstones outlive a verification racing the commit.
pub async fn prepare_status_change(
    db: &Db,
    auth: &KeyAuth<'_>,
    standing: &Standing<'_>,
    integration_id: Uuid,
    change: IntegrationChange,
) -> Result<(), ApiError> {
    if change != IntegrationChange::Suspend {
        return Ok(());
    }
    let integration = store::tenancy::find_integration(db, integration_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Integration"))?;
    standing
        .publish(
            integration_id,
            IntegrationStatus::Suspended,
            Clock::from_column(integration.clock_offset_secs),
        )
        .await?;
    for key_id in store::credentials::api_keys::ids_of_integration(db, integration_id).await? {
        auth.invalidate(key_id).await?;
    }
    Ok(())
}

/// Suspends or reactivates an integration, audited, in the caller's transaction; see
/// [`prepare_status_change`] and [`settle_status_change`] for what surrounds it.
pub async fn set_integration_status(
    txn: &impl ConnectionTrait,
    op: &Operator,
    integration_id: Uuid,
    change: IntegrationChange,
    reason: String,
) -> Result<entities::integration::Model, ApiError> {
    let status = change.target();
    let integration = store::tenancy::find_integration(txn, integration_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Integration"))?;
    let before = integration.status;
    let updated = store::tenancy::set_integration_status(txn, integration, status).await?;
    audit(
        txn,
        &op.actor(),
        change.action(),
        "integration",
        Some(integration_id.to_string()),
        Some(reason),
        json!({"from": before.as_str(), "to": status.as_str()}),
    )
    .await?;
    Ok(updated)
}

/// After the transaction: a committed change publishes the status the database now holds
/// (a reactivation's tokens work again on the next request); a suspension that did not
/// commit drops what it published, so the database decides again; a replay changed nothing.
pub async fn settle_status_change(
    db: &Db,
    standing: &Standing<'_>,
    integration_id: Uuid,
    change: IntegrationChange,
    settled: Settled,
) -> Result<(), ApiError> {
    match settled {
        Settled::Committed => {
            let Some(i) = store::tenancy::find_integration(db, integration_id).await? else {
                return Ok(());
            };
            standing
                .publish(
                    integration_id,
                    i.status,
                    Clock::from_column(i.clock_offset_secs),
                )
                .await
        }
        Settled::Failed if change == IntegrationChange::Suspend => {
            if let Err(e) = standing.forget(integration_id).await {
                tracing::warn!(error = %e, %integration_id, "dropping a published status failed");
            }
            Ok(())
        }
        Settled::Failed | Settled::Replayed => Ok(()),
    }
}

/// The three steps of a change of standing, for a tool without an idempotency record (the
/// console).
pub async fn change_integration_status(
    db: &Db,
    auth: &KeyAuth<'_>,
    standing: &Standing<'_>,
    op: &Operator,
    integration_id: Uuid,
    change: IntegrationChange,
    reason: String,
) -> Result<entities::integration::Model, ApiError> {
    let changed = async {
        prepare_status_change(db, auth, standing, integration_id, change).await?;
        store::in_transaction(db, async |txn| {
            set_integration_status(txn, op, integration_id, change, reason).await
        })
        .await
    }
    .await;
    let settled = match changed {
        Ok(_) => Settled::Committed,
        Err(_) => Settled::Failed,
    };
    settle_status_change(db, standing, integration_id, change, settled).await?;
    changed
}

/// Sets which identity credential types an integration may use (a subset of
/// `identity::IDENTITY_CREDENTIAL_TYPES`, kept in the contract's order). Audited.
pub async fn set_identify_credential_types(
    txn: &impl ConnectionTrait,
    op: &Operator,
    integration_id: Uuid,
    types: &[String],
    reason: String,
) -> Result<entities::integration::Model, ApiError> {
    let ordered: Vec<String> = crate::domain::customers::identity::IDENTITY_CREDENTIAL_TYPES
        .iter()
        .filter(|t| types.iter().any(|x| x == *t))
        .map(|t| t.to_string())
        .collect();
    let integration = store::tenancy::find_integration(txn, integration_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Integration"))?;
    let before = integration.identify_credential_types.clone();
    let updated = store::tenancy::set_identify_credential_types(txn, integration, &ordered).await?;
    audit(
        txn,
        &op.actor(),
        "integration.identify_credential_types",
        "integration",
        Some(integration_id.to_string()),
        Some(reason),
        json!({"from": before, "to": ordered}),
    )
    .await?;
    Ok(updated)
}

/// Replaces an integration's browser origins (already normalised by `cors::normalize_origin`;
/// empty: none). Audited with the lists before and after.
pub async fn set_cors_origins(
    txn: &impl ConnectionTrait,
    op: &Operator,
    integration_id: Uuid,
    origins: &[String],
    reason: String,
) -> Result<entities::integration::Model, ApiError> {
    let integration = store::tenancy::find_integration(txn, integration_id)
        .await?
        .ok_or_else(|| ApiError::not_found("Integration"))?;
    let before = integration
        .cors_origins
        .clone()
        .unwrap_or_else(|| json!([]));
    let updated = store::tenancy::set_cors_origins(txn, integration, origins).await?;
    audit(
        txn,
        &op.actor(),
        "integration.cors_origins",
        "integration",
        Some(integration_id.to_string()),
        Some(reason),
        json!({"from": before, "to": origins}),
    )
    .await?;
    Ok(updated)
}

/// The audit action a ledger check is recorded under.
pub const LEDGER_CHECK: &str = "ledger.check";

/// Runs the ledger check (every balance recomputed from its entries, every posting
/// balanced) and records what it found in the audit log, so the console's health page
/// can say when it last ran and with what result, whoever ran it (`wallet-api ledger
/// check` or the console). With `verify_snapshots` (the CLI) it also builds every stored
/// balance snapshot again and compares: minutes on a large ledger, too long for a request,
/// so the operator API and the console leave it to the CLI.
pub async fn check_ledger(
    db: &Db,
    actor: &str,
    merchant: Option<Uuid>,
    verify_snapshots: bool,
) -> Result<store::ledger::Report, ApiError> {
    let mut report = store::ledger::check(db, merchant).await?;
    if verify_snapshots {
        report.snapshot_mismatches =
            crate::domain::ledger::snapshots::verify_all(db, merchant).await?;
    }
    audit(
        db,
        actor,
        LEDGER_CHECK,
        "ledger",
        merchant.map(|m| m.to_string()),
        None,
        json!({
            "consistent": report.is_consistent(),
            "postings": report.postings,
            "entries": report.entries,
            "unbalanced_postings": report.unbalanced_postings.len(),
            "wallet_mismatches": report.wallet_mismatches.len(),
            "grant_mismatches": report.grant_mismatches.len(),
            "pending_mismatches": report.pending_mismatches.len(),
            "snapshots_verified": verify_snapshots,
            "snapshot_mismatches": report.snapshot_mismatches.len(),
        }),
    )
    .await?;
    Ok(report)
}

/// The audit action dropping the daily balance snapshots is recorded under.
pub const SNAPSHOTS_RESET: &str = "ledger.snapshots_reset";

/// Drops the merchant's daily balance snapshots (every merchant's when `None`), with the
/// audit entry, in one transaction; the workers' builder makes them again from the ledger.
/// Returns how many merchants had any.
pub async fn reset_snapshots(
    db: &Db,
    actor: &str,
    merchant: Option<Uuid>,
) -> Result<u64, ApiError> {
    store::in_transaction(db, async |txn| {
        let n = store::ledger::snapshots::reset(txn, merchant).await?;
        audit(
            txn,
            actor,
            SNAPSHOTS_RESET,
            "ledger",
            merchant.map(|m| m.to_string()),
            None,
            json!({ "merchants": n }),
        )
        .await?;
        Ok(n)
    })
    .await
}

/// The most recent ledger check's audit entry, if one ever ran.
pub async fn last_ledger_check(db: &Db) -> Result<Option<operator_audit::Model>, ApiError> {
    let f = store::credentials::operators::AuditFilter {
        action: Some(LEDGER_CHECK.into()),
        ..Default::default()
    };
    Ok(store::credentials::operators::audit_page(db, &f, None, 1)
        .await?
        .into_iter()
        .next())
}
