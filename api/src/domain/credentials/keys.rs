//! Minting per-merchant keys from a caller's key. A key's scope and permissions are fixed
//! at creation; the scope must be consistent (brand within enterprise, branch within brand)
//! and neither can be wider than the caller's own.
//!
//! Revoking a key leaves the keys it minted working: a platform that rotates its own key
//! must not take every merchant's till down with it. The keys a key minted (through any
//! of its regenerations) are listed with `created_by`, and `cascade` revokes the whole
//! tree in one call.
use chrono::{DateTime, Utc};

use crate::domain::credentials::authenticate::KeyAuth;
use entities::{api_key, api_key::ApiKeyStatus};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::credentials::{
    Permission, Permissions, Principal, Scope, api_key as raw_key, permissions::missing,
};
use crate::{error::ApiError, store};

/// The states a listed key can be in (a deleted key no longer lists).
pub const LIST_STATUSES: &[&str] = &["active", "inactive"];

#[derive(Clone, Debug)]

pub struct CreateKey {
    /// The request's `context.merchant_id`, which `enterprise_id` must equal.
    pub merchant_id: Uuid,
    pub enterprise_id: Uuid,
    pub brand_id: Option<Uuid>,
    pub branch_id: Option<Uuid>,
    pub label: String,
    pub expires_at: Option<DateTime<Utc>>,
    /// None: the per-merchant default (terminal and reporting), as far as the caller
    /// holds it.
    pub permissions: Option<Permissions>,
}

/// A key as its holder's integration reads it (never its secret nor its hash): the domain's
/// read model, so the HTTP edge names no table.
#[derive(Clone, Debug)]
pub struct Key {
    pub id: Uuid,
    /// Prefix plus the first 4 random characters.
    pub key_prefix: String,
    pub key_last_four: String,
    /// `integration`, `enterprise`, `brand` or `branch`.
    pub scope: String,
    pub enterprise_id: Option<Uuid>,
    pub brand_id: Option<Uuid>,
    pub branch_id: Option<Uuid>,
    pub label: String,
    pub is_sandbox: bool,
    pub status: ApiKeyStatus,
    /// None: never expires.
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// The key this one replaced (regenerate).
    pub previous_key_id: Option<Uuid>,
    /// What the key may do.
    pub permissions: Permissions,
    /// The key that minted this one; None for a platform key.
    pub created_by_key_id: Option<Uuid>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
}

impl From<api_key::Model> for Key {
    fn from(m: api_key::Model) -> Self {
        Key {
            id: m.id,
            permissions: Permissions::from_column(&m.permissions),
            key_prefix: m.key_prefix,
            key_last_four: m.key_last_four,
            scope: m.scope,
            enterprise_id: m.enterprise_id,
            brand_id: m.brand_id,
            branch_id: m.branch_id,
            label: m.label,
            is_sandbox: m.is_sandbox,
            status: m.status,
            expires_at: m.expires_at,
            created_at: m.created_at,
            previous_key_id: m.previous_key_id,
            created_by_key_id: m.created_by_key_id,
            revoked_at: m.revoked_at,
            deleted_at: m.deleted_at,
        }
    }
}

/// A freshly minted secret and its bcrypt hash, made before the transaction opens so the
/// slow hash never holds a database lock.
pub struct Minted {
    pub key: raw_key::MintedKey,
    pub hash: String,
}

pub async fn mint(
    is_sandbox: bool,
    cell: Option<String>,
    bcrypt_cost: u32,
) -> Result<Minted, ApiError> {
    let key = raw_key::mint(is_sandbox, cell.as_deref());
    let raw = key.raw.clone();
    let hash = tokio::task::spawn_blocking(move || raw_key::hash(&raw, bcrypt_cost))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    Ok(Minted { key, hash })
}

/// Whether `target` lies within `caller` (the caller may act for every merchant in
/// `linked` when it is integration-scoped).
pub fn within(caller: &Scope, target: &Scope, linked: &[Uuid]) -> bool {
    let e = target.enterprise_id();
    match caller {
        Scope::Integration => e.is_some_and(|e| linked.contains(&e)),
        Scope::Enterprise { enterprise_id } => e == Some(*enterprise_id),
        Scope::Brand {
            enterprise_id,
            brand_id,
        } => e == Some(*enterprise_id) && target.brand_id() == Some(*brand_id),
        Scope::Branch { branch_id, .. } => target.branch_id() == Some(*branch_id),
    }
}

fn outside_scope() -> ApiError {
    ApiError::forbidden("The requested scope is outside the credential's own scope.")
}

/// The scope a new key would have, once the caller may mint it. The scope rule comes
/// before any check of how the body's members agree with each other, whatever the body's
/// shape: a merchant, brand or branch outside the caller's authority is FORBIDDEN, the same
/// answer whether the foreign id exists elsewhere or nowhere (spec: "A branch_id outside
/// the caller's scope returns FORBIDDEN (403)"). Only then does a branch named without its
/// brand, or an enterprise other than `context.merchant_id`, get its VALIDATION_ERROR.
async fn scope_of<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    req: &CreateKey,
) -> Result<Scope, ApiError> {
    let linked = store::tenancy::linked_enterprises(c, caller.integration_id).await?;
    if !linked.contains(&req.enterprise_id) {
        return Err(ApiError::forbidden(
            "The credential is not authorized for this merchant.",
        ));
    }
    if let Some(b) = req.brand_id
        && store::tenancy::find_brand(c, req.enterprise_id, b)
            .await?
            .is_none()
    {
        return Err(outside_scope());
    }
    // A branch is found by its enterprise alone, so one named without its brand is judged
    // by the brand it really has.
    let branch_brand = match req.branch_id {
        None => None,
        Some(br) => {
            let branch = store::tenancy::find_branch_of_enterprise(c, req.enterprise_id, br)
                .await?
                .ok_or_else(outside_scope)?;
            if req.brand_id.is_some_and(|b| b != branch.brand_id) {
                return Err(outside_scope());
            }
            Some(branch.brand_id)
        }
    };
    let kind = match (req.brand_id.or(branch_brand), req.branch_id) {
        (_, Some(_)) => "branch",
        (Some(_), None) => "brand",
        _ => "enterprise",
    };
    let target = Scope::from_parts(
        kind,
        Some(req.enterprise_id),
        req.brand_id.or(branch_brand),
        req.branch_id,
    )
    .ok_or_else(outside_scope)?;
    if !within(&caller.scope, &target, &linked) {
        return Err(outside_scope());
    }
    if req.branch_id.is_some() && req.brand_id.is_none() {
        return Err(ApiError::field(
            "/brand_id",
            "required",
            "is required when branch_id is set",
        ));
    }
    if req.enterprise_id != req.merchant_id {
        return Err(ApiError::field(
            "/enterprise_id",
            "merchant_mismatch",
            "must equal context.merchant_id",
        ));
    }
    Ok(target)
}

pub async fn create<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    req: CreateKey,
    minted: Minted,
) -> Result<Key, ApiError> {
    caller.require(Permission::IntegrationsCreate)?;
    let permissions = match req.permissions {
        Some(asked) => {
            let beyond = asked.beyond(caller.permissions);
            if !beyond.is_empty() {
                return Err(missing(&beyond));
            }
            asked
        }
        None => Permissions::merchant_default().intersect(caller.permissions),
    };
    let target = scope_of(c, caller, &req).await?;
    let model = store::credentials::api_keys::insert(
        c,
        store::credentials::api_keys::NewKey {
            id: Uuid::now_v7(),
            integration_id: caller.integration_id,
            scope: (&target).into(),
            key_prefix: &minted.key.key_prefix,
            key_hash: &minted.hash,
            key_last_four: &minted.key.key_last_four,
            label: &req.label,
            is_sandbox: caller.is_sandbox,
            expires_at: req.expires_at,
            previous_key_id: None,
            permissions: permissions.to_column(),
            created_by_key_id: caller.key_id,
        },
    )
    .await?;
    Ok(model.into())
}

/// The key as its caller may see it: within the caller's scope, or NOT_FOUND (the same
/// answer as for an id that does not exist, or belongs to another integration).
async fn find_visible<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    key_id: Uuid,
) -> Result<api_key::Model, ApiError> {
    let not_found = || ApiError::not_found("API key");
    let key = store::credentials::api_keys::find_live(c, caller.integration_id, key_id)
        .await?
        .ok_or_else(not_found)?;
    let scope = Scope::from_parts(&key.scope, key.enterprise_id, key.brand_id, key.branch_id)
        .ok_or_else(not_found)?;
    let visible = match scope {
        Scope::Integration => caller.scope == Scope::Integration,
        s => {
            let linked = store::tenancy::linked_enterprises(c, caller.integration_id).await?;
            within(&caller.scope, &s, &linked)
        }
    };
    if visible { Ok(key) } else { Err(not_found()) }
}

/// The key, if the caller may change it: visible to it, and holding no permission the
/// caller lacks (regenerating a wider key would hand the caller a wider raw key).
async fn find_manageable<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    key_id: Uuid,
) -> Result<api_key::Model, ApiError> {
    let key = find_visible(c, caller, key_id).await?;
    let beyond = Permissions::from_column(&key.permissions).beyond(caller.permissions);
    if beyond.is_empty() {
        Ok(key)
    } else {
        Err(missing(&beyond))
    }
}

/// Every key `root` minted, and every key those minted, through any regeneration of each
/// (a regenerated key keeps its predecessor's creator, and the keys a predecessor minted
/// belong to its successor's tree). Deleted keys and keys outside the caller's scope are
/// left out.
async fn tree_of<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    root: &api_key::Model,
) -> Result<Vec<api_key::Model>, ApiError> {
    let linked = store::tenancy::linked_enterprises(c, caller.integration_id).await?;
    let mut creators = vec![root.id];
    let mut prev = root.previous_key_id;
    while let Some(p) = prev {
        if creators.contains(&p) {
            break;
        }
        creators.push(p);
        prev = store::credentials::api_keys::find_live(c, caller.integration_id, p)
            .await?
            .and_then(|k| k.previous_key_id);
    }
    let mut seen: Vec<Uuid> = creators.clone();
    let mut found = Vec::new();
    while !creators.is_empty() {
        let children =
            store::credentials::api_keys::minted_by(c, caller.integration_id, &creators).await?;
        creators = Vec::new();
        for k in children {
            if seen.contains(&k.id) {
                continue;
            }
            seen.push(k.id);
            creators.push(k.id);
            let inside = Scope::from_parts(&k.scope, k.enterprise_id, k.brand_id, k.branch_id)
                .is_some_and(|s| within(&caller.scope, &s, &linked));
            if inside {
                found.push(k);
            }
        }
    }
    Ok(found)
}

/// Before a revoke, delete or regenerate opens its transaction (never for a replay): the
/// key, and with `cascade` the keys of its tree, leave every replica's cache, so from here
/// on only the database admits them; their tombstones outlive a verification racing the
/// commit. A key the caller may not manage is left alone: the change itself refuses it.
pub async fn uncache_before(
    db: &crate::store::Db,
    auth: &KeyAuth<'_>,
    caller: &Principal,
    key_id: Uuid,
    cascade: bool,
) -> Result<(), ApiError> {
    let Ok(key) = find_manageable(db, caller, key_id).await else {
        return Ok(());
    };
    let mut ids = vec![key.id];
    if cascade {
        ids.extend(tree_of(db, caller, &key).await?.iter().map(|k| k.id));
    }
    uncache(auth, &ids).await
}

/// After the change committed: the keys it changed leave the caches again (one of a tree
/// minted while the change ran included).
pub async fn uncache(auth: &KeyAuth<'_>, ids: &[Uuid]) -> Result<(), ApiError> {
    for id in ids {
        auth.invalidate(*id).await?;
    }
    Ok(())
}

/// A revoke's outcome: the key, and with `cascade` the active keys of its tree that were
/// revoked with it.
pub struct Revoked {
    pub key: Key,
    pub cascaded: Vec<Key>,
}

/// active → inactive; revoking an inactive key again changes nothing and succeeds. With
/// `cascade`, every active key of its tree goes inactive too (again a no-op for those
/// already inactive), so a leaked key and everything it minted end in one call.
pub async fn revoke<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    key_id: Uuid,
    reason: Option<String>,
    cascade: bool,
) -> Result<Revoked, ApiError> {
    caller.require(Permission::IntegrationsUpdate)?;
    let key = find_manageable(c, caller, key_id).await?;
    let tree = if cascade {
        tree_of(c, caller, &key).await?
    } else {
        Vec::new()
    };
    let key = deactivate(c, key, reason.clone()).await?;
    let mut cascaded = Vec::new();
    for k in tree
        .into_iter()
        .filter(|k| k.status == ApiKeyStatus::Active)
    {
        let why = Some(
            reason
                .clone()
                .unwrap_or_else(|| format!("revoked with key {}", key.id)),
        );
        cascaded.push(deactivate(c, k, why).await?.into());
    }
    Ok(Revoked {
        key: key.into(),
        cascaded,
    })
}

async fn deactivate<C: ConnectionTrait>(
    c: &C,
    key: api_key::Model,
    reason: Option<String>,
) -> Result<api_key::Model, ApiError> {
    if key.status == ApiKeyStatus::Inactive {
        return Ok(key);
    }
    store::credentials::api_keys::transition(c, &key, ApiKeyStatus::Inactive, reason, Utc::now())
        .await?
        .ok_or_else(changed_concurrently)
}

fn changed_concurrently() -> ApiError {
    ApiError::conflict("The key changed concurrently; read it again and retry.")
}

/// active or inactive → deleted.
pub async fn delete<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    key_id: Uuid,
    reason: Option<String>,
) -> Result<Key, ApiError> {
    caller.require(Permission::IntegrationsDelete)?;
    let key = find_manageable(c, caller, key_id).await?;
    store::credentials::api_keys::transition(c, &key, ApiKeyStatus::Deleted, reason, Utc::now())
        .await?
        .map(Key::from)
        .ok_or_else(changed_concurrently)
}

/// An active key is replaced by a new one with the same scope, label and expiry; the old
/// one stops working at once. Returns the new key.
pub async fn regenerate<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    key_id: Uuid,
    reason: Option<String>,
    minted: Minted,
) -> Result<Key, ApiError> {
    caller.require(Permission::IntegrationsUpdate)?;
    let old = find_manageable(c, caller, key_id).await?;
    if old.status != ApiKeyStatus::Active {
        return Err(ApiError::field(
            "path:keyId",
            "not_active",
            "only an active key can be regenerated",
        ));
    }
    let scope = Scope::from_parts(&old.scope, old.enterprise_id, old.brand_id, old.branch_id)
        .ok_or_else(|| ApiError::not_found("API key"))?;
    // Retire the old key first, conditionally: a concurrent revoke or delete wins and no
    // successor is issued.
    let why = reason.or_else(|| Some("regenerated".into()));
    store::credentials::api_keys::transition(c, &old, ApiKeyStatus::Inactive, why, Utc::now())
        .await?
        .ok_or_else(changed_concurrently)?;
    let new = store::credentials::api_keys::insert(
        c,
        store::credentials::api_keys::NewKey {
            id: Uuid::now_v7(),
            integration_id: old.integration_id,
            scope: (&scope).into(),
            key_prefix: &minted.key.key_prefix,
            key_hash: &minted.hash,
            key_last_four: &minted.key.key_last_four,
            label: &old.label,
            is_sandbox: old.is_sandbox,
            expires_at: old.expires_at,
            previous_key_id: Some(old.id),
            permissions: Permissions::from_column(&old.permissions).to_column(),
            created_by_key_id: old.created_by_key_id,
        },
    )
    .await?;
    Ok(new.into())
}

/// One page of the caller's keys (within its scope), and whether more follow.
pub async fn list<C: ConnectionTrait>(
    c: &C,
    caller: &Principal,
    status: Option<String>,
    branch_id: Option<Uuid>,
    created_by: Option<Uuid>,
    after: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<Key>, bool), ApiError> {
    caller.require(Permission::IntegrationsRead)?;
    let f = store::credentials::api_keys::ListFilter {
        status,
        branch_id,
        created_by,
        after,
        within: (&caller.scope).into(),
    };
    let rows = store::credentials::api_keys::list(c, caller.integration_id, &f, limit + 1).await?;
    let (rows, more) = crate::domain::page_of(rows, limit);
    Ok((rows.into_iter().map(Key::from).collect(), more))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_never_widens() {
        let (e, b, br) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let ent = Scope::Enterprise { enterprise_id: e };
        let brand = Scope::Brand {
            enterprise_id: e,
            brand_id: b,
        };
        let branch = Scope::Branch {
            enterprise_id: e,
            brand_id: b,
            branch_id: br,
        };
        assert!(within(&Scope::Integration, &ent, &[e]));
        assert!(!within(&Scope::Integration, &ent, &[]));
        assert!(within(&ent, &branch, &[e]));
        assert!(within(&brand, &branch, &[e]));
        assert!(!within(&brand, &ent, &[e]));
        assert!(!within(&branch, &brand, &[e]));
        let other = Scope::Branch {
            enterprise_id: e,
            brand_id: b,
            branch_id: Uuid::now_v7(),
        };
        assert!(!within(&branch, &other, &[e]));
    }
}
