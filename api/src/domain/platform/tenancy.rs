//! Operator onboarding: one integration, its merchant, brand, branches, wallet program and
//! platform key, created together or not at all.
use crate::store::Db;
use serde::Serialize;
use uuid::Uuid;

use crate::{
    domain::credentials::{Scope, api_key},
    store,
};

/// Credential types a new integration may identify customers with until it is configured
/// otherwise.
/// A new integration may use every identity credential type; operators narrow the list
/// per integration (`POST /v1/operator/integrations/{id}/identify-credential-types`).
pub const DEFAULT_IDENTIFY_CREDENTIAL_TYPES: &[&str] =
    crate::domain::customers::identity::IDENTITY_CREDENTIAL_TYPES;

#[derive(Clone, Debug)]
pub struct NewTenant {
    pub name: String,
    pub is_sandbox: bool,
    pub currency: String,
    pub branches: u32,
}

/// What `wallet-api tenant create --json` prints. The platform key is shown here only.
#[derive(Clone, Debug, Serialize)]
pub struct TenantCreated {
    pub integration_id: Uuid,
    pub merchant_id: Uuid,
    pub enterprise_id: Uuid,
    pub brand_id: Uuid,
    pub branch_ids: Vec<Uuid>,
    pub wallet_program_id: Uuid,
    pub currency: String,
    pub platform_key: String,
    pub is_sandbox: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("invalid {0}: {1}")]
    Invalid(&'static str, String),
    #[error(transparent)]
    Db(#[from] sea_orm::DbErr),
    #[error("hashing the platform key failed: {0}")]
    Hash(String),
}

pub fn check(t: &NewTenant) -> Result<(), TenantError> {
    let name_len = t.name.trim().chars().count();
    if name_len == 0 || name_len > 200 || t.name.chars().any(char::is_control) {
        return Err(TenantError::Invalid(
            "--name",
            "1 to 200 printable characters".into(),
        ));
    }
    if !(t.currency.len() == 3 && t.currency.bytes().all(|b| b.is_ascii_uppercase())) {
        return Err(TenantError::Invalid(
            "--currency",
            "an ISO-4217 code of 3 upper-case letters".into(),
        ));
    }
    if !(1..=100).contains(&t.branches) {
        return Err(TenantError::Invalid("--branches", "1 to 100".into()));
    }
    Ok(())
}

pub async fn create(
    db: &Db,
    t: &NewTenant,
    bcrypt_cost: u32,
    cell: Option<&str>,
) -> Result<TenantCreated, TenantError> {
    check(t)?;
    let minted = api_key::mint(t.is_sandbox, cell);
    let raw = minted.raw.clone();
    // bcrypt is deliberately slow: keep it off the async executor.
    let hash = tokio::task::spawn_blocking(move || api_key::hash(&raw, bcrypt_cost))
        .await
        .map_err(|e| TenantError::Hash(e.to_string()))?
        .map_err(|e| TenantError::Hash(e.to_string()))?;

    let integration_id = Uuid::now_v7();
    let enterprise_id = Uuid::now_v7();
    let brand_id = Uuid::now_v7();
    let program_id = Uuid::now_v7();
    let branch_ids: Vec<Uuid> = (0..t.branches).map(|_| Uuid::now_v7()).collect();
    let name = t.name.trim();

    let txn = store::begin(db).await?;
    store::tenancy::insert_integration(
        &txn,
        integration_id,
        name,
        t.is_sandbox,
        DEFAULT_IDENTIFY_CREDENTIAL_TYPES,
    )
    .await?;
    store::tenancy::insert_enterprise(&txn, enterprise_id, name).await?;
    store::tenancy::insert_brand(&txn, brand_id, enterprise_id, name).await?;
    for (i, b) in branch_ids.iter().enumerate() {
        store::tenancy::insert_branch(
            &txn,
            *b,
            enterprise_id,
            brand_id,
            &format!("Branch {}", i + 1),
        )
        .await?;
    }
    store::tenancy::link_enterprise(&txn, integration_id, enterprise_id).await?;
    store::tenancy::insert_wallet_program(
        &txn,
        program_id,
        enterprise_id,
        &format!("{name} {}", t.currency),
        &t.currency,
    )
    .await?;
    store::credentials::api_keys::insert(
        &txn,
        store::credentials::api_keys::NewKey {
            id: Uuid::now_v7(),
            integration_id,
            scope: (&Scope::Integration).into(),
            key_prefix: &minted.key_prefix,
            key_hash: &hash,
            key_last_four: &minted.key_last_four,
            label: "platform key",
            is_sandbox: t.is_sandbox,
            expires_at: None,
            previous_key_id: None,
            permissions: crate::domain::credentials::Permissions::all().to_column(),
            created_by_key_id: None,
        },
    )
    .await?;
    txn.commit().await?;

    Ok(TenantCreated {
        integration_id,
        merchant_id: enterprise_id,
        enterprise_id,
        brand_id,
        branch_ids,
        wallet_program_id: program_id,
        currency: t.currency.clone(),
        platform_key: minted.raw,
        is_sandbox: t.is_sandbox,
    })
}
