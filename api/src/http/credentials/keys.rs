//! Key lifecycle: minting per-merchant keys.
use crate::http::pipeline::fields::{
    Field, KeyStatuses, List, OneOf, PermissionNames, Text, UuidText,
    alternatives::{Alternatives, Branch},
};
use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::{
    Object, OpenApi,
    param::{Path, Query},
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::{
            Permission, Permissions,
            keys::{self, CreateKey, Key},
        },
        validate::{self, Errors},
    },
    idempotency::Outcome,
    state::AppState,
    store::WriteTxn,
};

pub struct KeysApi;

/// Mint a key for a merchant, one of its brands, or one branch.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CreateKeyRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The merchant (UUID); must equal `context.merchant_id`.
    #[serde(default)]
    pub enterprise_id: crate::http::pipeline::fields::UuidText,
    /// Narrows the key to one brand of the enterprise.
    #[oai(nullable)]
    pub brand_id: Option<crate::http::pipeline::fields::UuidText>,
    /// Narrows the key to one branch of the brand (needs `brand_id`).
    #[oai(nullable)]
    pub branch_id: Option<crate::http::pipeline::fields::UuidText>,
    /// Up to 120 characters.
    #[oai(nullable)]
    pub label: Option<Text<0, 120>>,
    /// When the key stops working (RFC 3339, in the future); null never expires.
    #[oai(nullable)]
    pub expires_at: Option<crate::http::pipeline::fields::DateTimeText>,
    /// What the key may do: names from `integrations:create`, `integrations:read`,
    /// `integrations:update`, `integrations:delete`, `terminal`, `reporting`,
    /// `settlements`, `catalog`, `incentives`, `webhooks`. Only permissions the caller
    /// holds (else 403 FORBIDDEN with `details.missing_permissions`). Absent or null:
    /// `terminal` and `reporting` (as far as the caller holds them), never key
    /// management.
    #[oai(nullable)]
    pub permissions: Option<List<Field<OneOf<PermissionNames>>, 1, 11>>,
}

/// A branch key names its brand too. Published here; checked by `keys::create` after the
/// scope rule.
pub const BRANCH_NEEDS_BRAND: Alternatives = Alternatives {
    schema: "CreateKeyRequest",
    branches: &[
        Branch {
            given: &[],
            absent: &["branch_id"],
        },
        Branch {
            given: &["brand_id"],
            absent: &[],
        },
    ],
    field: "/brand_id",
    issue: "required",
    message: "is required when branch_id is set",
};

impl Validate for CreateKeyRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        // Whether the members agree with each other (enterprise_id is context.merchant_id, a
        // branch names its brand) is checked after the scope rule (`keys::create`), so a
        // merchant, brand or branch outside the caller's scope is FORBIDDEN whatever else
        // the body says.
        if self.enterprise_id.is_empty() {
            e.push("/enterprise_id", "required", "is required (a UUID)");
        } else {
            validate::uuid(e, "/enterprise_id", &self.enterprise_id);
        }
        if let Some(b) = &self.brand_id {
            validate::uuid(e, "/brand_id", b);
        }
        if let Some(b) = &self.branch_id {
            validate::uuid(e, "/branch_id", b);
        }
        if let Some(l) = &self.label {
            l.check(e, "/label");
        }
        if let Some(t) = &self.expires_at
            && let Some(at) = validate::rfc3339(e, "/expires_at", t)
        {
            validate::future(e, "/expires_at", at, Utc::now());
        }
        if let Some(ps) = &self.permissions {
            ps.check(e, "/permissions");
            for (i, p) in ps.iter().enumerate() {
                p.check(e, &format!("/permissions/{i}"));
            }
        }
    }
}

impl CreateKeyRequest {
    fn to_domain(&self) -> CreateKey {
        let id = |s: &Option<UuidText>| s.as_deref().and_then(|v| Uuid::parse_str(v).ok());
        CreateKey {
            merchant_id: Uuid::parse_str(&self.context.merchant_id).unwrap_or_default(),
            enterprise_id: Uuid::parse_str(&self.enterprise_id).unwrap_or_default(),
            brand_id: id(&self.brand_id),
            branch_id: id(&self.branch_id),
            label: self.label.clone().map(String::from).unwrap_or_default(),
            expires_at: self
                .expires_at
                .as_deref()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc)),
            permissions: self.permissions.as_ref().map(|ps| {
                Permissions::of(
                    &ps.iter()
                        .filter_map(|p| Permission::parse(p))
                        .collect::<Vec<_>>(),
                )
            }),
        }
    }
}

/// A new key. `raw_key` is shown here once (and in an idempotent replay of this call).
#[derive(Object, Serialize)]
pub struct ApiKeyCreated {
    pub key_id: String,
    /// `<prefix>_<segment>_<base64url>`; the segment is opaque, never parse it.
    pub raw_key: String,
    #[serde(flatten)]
    #[oai(flatten)]
    pub key: ApiKeyView,
}

/// A key's metadata. The raw key is never retrievable.
#[derive(Object, Serialize)]
pub struct ApiKeyView {
    /// Prefix plus the first 4 random characters. Opaque.
    pub key_prefix: String,
    pub key_last_four: String,
    /// `integration`, `enterprise`, `brand` or `branch`.
    pub scope: String,
    #[oai(nullable)]
    pub enterprise_id: Option<String>,
    #[oai(nullable)]
    pub brand_id: Option<String>,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    pub label: String,
    pub is_sandbox: bool,
    /// `active` or `inactive`.
    pub status: String,
    /// Null never expires.
    #[oai(nullable)]
    pub expires_at: Option<String>,
    pub created_at: String,
    /// The key this one replaced (regenerate).
    #[oai(nullable)]
    pub previous_key_id: Option<String>,
    /// What the key may do (see `POST /auth/keys`).
    pub permissions: Vec<String>,
    /// The key that minted this one; null for a platform key.
    #[oai(nullable)]
    pub created_by_key_id: Option<String>,
}

/// A listed key.
#[derive(Object, Serialize)]
pub struct ApiKeyItem {
    pub key_id: String,
    #[serde(flatten)]
    #[oai(flatten)]
    pub key: ApiKeyView,
}

/// The outcome of a revoke or delete.
#[derive(Object, Serialize)]
pub struct KeyStatusResult {
    pub key_id: String,
    /// `inactive` after revoke, `deleted` after delete.
    pub status: String,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<String>,
    /// A revoke with `cascade`: the keys of its tree that were active and are now
    /// inactive (empty when there were none).
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cascaded_key_ids: Option<Vec<String>>,
}

/// Regenerate or delete a key.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct KeyActionRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Why (up to 200 characters), kept with the key.
    #[oai(nullable)]
    pub reason: Option<Text<0, 200>>,
    /// Revoke's alone: refused here (absent or null), so a caller expecting a whole tree
    /// to go learns it did not.
    #[oai(nullable)]
    pub cascade: Option<bool>,
}

/// `cascade` belongs to revoke alone.
pub const NO_CASCADE: Alternatives = Alternatives {
    schema: "KeyActionRequest",
    branches: &[Branch {
        given: &[],
        absent: &["cascade"],
    }],
    field: "/cascade",
    issue: "not_allowed",
    message: "applies to revoke only",
};

impl Validate for KeyActionRequest {
    fn validate(&self, e: &mut Errors) {
        action_checks(e, &self.meta, &self.context, &self.reason);
        NO_CASCADE.check(e, "", |_| self.cascade.is_some());
    }
}

/// Revoke a key.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct RevokeKeyRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// Why (up to 200 characters), kept with the key.
    #[oai(nullable)]
    pub reason: Option<Text<0, 200>>,
    /// Also revoke every key this key minted, and every key those minted (through any
    /// regeneration). Default false: the keys it minted keep working.
    #[oai(nullable)]
    pub cascade: Option<bool>,
}

impl Validate for RevokeKeyRequest {
    fn validate(&self, e: &mut Errors) {
        action_checks(e, &self.meta, &self.context, &self.reason);
    }
}

/// What every key action checks of its envelope and reason.
fn action_checks(
    e: &mut Errors,
    meta: &RequestMeta,
    context: &RequestContext,
    reason: &Option<Text<0, 200>>,
) {
    meta.validate(e);
    context.validate(e);
    if let Some(r) = reason {
        r.check(e, "/reason");
    }
}

fn view(m: &Key) -> ApiKeyView {
    let id = |u: Option<Uuid>| u.map(|u| u.to_string());
    ApiKeyView {
        key_prefix: m.key_prefix.clone(),
        key_last_four: m.key_last_four.clone(),
        scope: m.scope.clone(),
        enterprise_id: id(m.enterprise_id),
        brand_id: id(m.brand_id),
        branch_id: id(m.branch_id),
        label: m.label.clone(),
        is_sandbox: m.is_sandbox,
        status: m.status.as_str().to_string(),
        expires_at: m.expires_at.map(ts),
        created_at: ts(m.created_at),
        previous_key_id: id(m.previous_key_id),
        permissions: m.permissions.names(),
        created_by_key_id: id(m.created_by_key_id),
    }
}

fn created(m: &Key, raw: String) -> ApiKeyCreated {
    ApiKeyCreated {
        key_id: m.id.to_string(),
        raw_key: raw,
        key: view(m),
    }
}

#[OpenApi(tag = "Tag::Auth")]
impl KeysApi {
    /// Create an API key
    ///
    /// Mints an enterprise, brand or branch key within the caller's own scope, with
    /// permissions the caller holds (default: `terminal` and `reporting`). The raw key is
    /// returned once; only its bcrypt hash is stored. Retrying with the same
    /// Idempotency-Key and body returns the same key. Permission: `integrations:create`.
    #[oai(path = "/auth/keys", method = "post", operation_id = "createApiKey")]
    async fn create(
        &self,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<CreateKeyRequest>,
    ) -> poem::Result<Reply<ApiKeyCreated>> {
        let principal = auth.0.clone();
        let req = body.value.to_domain();
        with_new_key(key, &auth.0, &body, None, async move |txn, minted| {
            keys::create(txn, &principal, req, minted).await
        })
        .await
    }

    /// List API keys
    ///
    /// Key metadata (never the raw key) of the calling integration, within the caller's
    /// scope, oldest first, with each key's permissions and the key that minted it.
    /// `created_by` lists the keys one key minted. Cursor-paginated: pass
    /// `meta.next_cursor` as `cursor`. Permission: `integrations:read`.
    #[oai(path = "/auth/keys", method = "get", operation_id = "listApiKeys")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        /// `active` or `inactive`.
        status: Query<Option<Field<OneOf<KeyStatuses>>>>,
        /// Only keys of this branch.
        branch_id: Query<Option<UuidText>>,
        /// Only keys minted by this key.
        created_by: Query<Option<UuidText>>,
        /// 1 to 200, default 50.
        limit: Query<Option<crate::http::pipeline::fields::PageLimit>>,
        cursor: Query<Option<crate::http::pipeline::fields::Cursor>>,
    ) -> poem::Result<Reply<Vec<ApiKeyItem>>> {
        let mut e = Errors::default();
        if let Some(s) = &status.0 {
            s.check(&mut e, "query:status");
        }
        let branch = branch_id
            .0
            .as_deref()
            .and_then(|b| validate::uuid(&mut e, "query:branch_id", b));
        let creator = created_by
            .0
            .as_deref()
            .and_then(|k| validate::uuid(&mut e, "query:created_by", k));
        let limit = crate::http::pipeline::fields::PageLimit::resolve(limit.0, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("key", &cursor.0)?;
        let (rows, more) = keys::list(
            &state.0.db,
            &auth.0,
            status.0.clone().map(String::from),
            branch,
            creator,
            after,
            limit,
        )
        .await?;
        let page = crate::http::pipeline::cursor::page("key", &rows, more, |k| k.id);
        let items: Vec<ApiKeyItem> = rows
            .iter()
            .map(|m| ApiKeyItem {
                key_id: m.id.to_string(),
                key: view(m),
            })
            .collect();
        Ok(Reply::page(&items, &page))
    }

    /// Revoke an API key
    ///
    /// The key stops working at once on every replica (no grace window). Revoking an
    /// inactive key again is a no-op success. Terminal JWTs already minted from it stay
    /// valid for their remaining TTL. The keys it minted keep working unless `cascade` is
    /// true, which revokes its whole tree (list it first with `GET /auth/keys?created_by=`).
    /// A key holding a permission the caller lacks is FORBIDDEN. Permission:
    /// `integrations:update`.
    #[oai(
        path = "/auth/keys/:key_id/revoke",
        method = "post",
        operation_id = "revokeApiKey"
    )]
    async fn revoke(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        key_id: Path<UuidText>,
        #[oai(name = "Idempotency-Key")] key: Idempotent<'_>,
        body: JsonBody<RevokeKeyRequest>,
    ) -> poem::Result<Reply<KeyStatusResult>> {
        let cascade = body.value.cascade.unwrap_or(false);
        let reason = body.value.reason.clone().map(String::from);
        change_status(
            state.0,
            &auth.0,
            &key_id.0,
            key,
            &body,
            StatusChange::Revoke { cascade },
            reason,
        )
        .await
    }

    /// Regenerate an API key
    ///
    /// Issues a new key with the same scope and permissions (its raw key shown once) and
    /// makes the old one fail at once; `previous_key_id` names it. The keys the old one
    /// minted stay in the new one's tree. A key holding a permission the caller lacks is
    /// FORBIDDEN. Permission: `integrations:update`.
    #[oai(
        path = "/auth/keys/:key_id/regenerate",
        method = "post",
        operation_id = "regenerateApiKey"
    )]
    async fn regenerate(
        &self,
        auth: ApiKeyAuth,
        key_id: Path<UuidText>,
        #[oai(name = "Idempotency-Key")] key: Idempotent<'_>,
        body: JsonBody<KeyActionRequest>,
    ) -> poem::Result<Reply<ApiKeyCreated>> {
        let id = path_uuid("path:keyId", &key_id.0)?;
        let principal = auth.0.clone();
        let reason = body.value.reason.clone().map(String::from);
        with_new_key(key, &auth.0, &body, Some(id), async move |txn, minted| {
            keys::regenerate(txn, &principal, id, reason, minted).await
        })
        .await
    }

    /// Delete an API key
    ///
    /// An active or inactive key becomes deleted: it no longer works or lists. A key
    /// holding a permission the caller lacks is FORBIDDEN. Permission:
    /// `integrations:delete`.
    #[oai(
        path = "/auth/keys/:key_id/delete",
        method = "post",
        operation_id = "deleteApiKey"
    )]
    async fn delete(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        key_id: Path<UuidText>,
        #[oai(name = "Idempotency-Key")] key: Idempotent<'_>,
        body: JsonBody<KeyActionRequest>,
    ) -> poem::Result<Reply<KeyStatusResult>> {
        let reason = body.value.reason.clone().map(String::from);
        change_status(
            state.0,
            &auth.0,
            &key_id.0,
            key,
            &body,
            StatusChange::Delete,
            reason,
        )
        .await
    }
}

/// A mutation that makes a key: the key is minted (and hashed, the slow part) only when the
/// work will run, never for a replay, and its raw value is the response's secret, sealed
/// in the stored response. A key it `replaces` leaves the caches before the transaction and
/// again after its commit (`keys::uncache_before`), never inside it.
async fn with_new_key<B>(
    key: Idempotent<'_>,
    principal: &crate::domain::credentials::Principal,
    body: &JsonBody<B>,
    replaces: Option<uuid::Uuid>,
    work: impl AsyncFnOnce(&WriteTxn, keys::Minted) -> Result<Key, crate::error::ApiError>,
) -> poem::Result<Reply<ApiKeyCreated>> {
    let st = key.state();
    let config = &st.config;
    let (sandbox, cell, cost) = (
        principal.is_sandbox,
        config.cell.clone(),
        config.bcrypt_cost,
    );
    let auth = st.key_auth();
    let reply = key
        .run_prepared(
            principal,
            body,
            async || {
                if let Some(old) = replaces {
                    keys::uncache_before(&st.db, &auth, principal, old, false).await?;
                }
                keys::mint(sandbox, cell, cost).await
            },
            async move |txn, _acting, minted| {
                let raw = minted.key.raw.clone();
                let m = work(txn, minted).await?;
                Ok(Outcome::new(created(&m, raw.clone())).with_secret(raw))
            },
        )
        .await?;
    if let Some(old) = replaces.filter(|_| !reply.replayed()) {
        keys::uncache(&auth, &[old]).await?;
    }
    Ok(reply)
}

#[derive(Clone, Copy)]
enum StatusChange {
    Revoke { cascade: bool },
    Delete,
}

/// Revoke and delete: the same mutation with a different transition.
async fn change_status<B: Sync>(
    st: &AppState,
    principal: &crate::domain::credentials::Principal,
    raw_id: &str,
    key: Idempotent<'_>,
    body: &JsonBody<B>,
    change: StatusChange,
    reason: Option<String>,
) -> poem::Result<Reply<KeyStatusResult>> {
    let id = path_uuid("path:keyId", raw_id)?;
    let caller = principal.clone();
    let auth = st.key_auth();
    let cascade = matches!(change, StatusChange::Revoke { cascade: true });
    // The keys this request changed (none for a replay): they leave the caches again after
    // the commit, as they did before the transaction.
    let mut changed = Vec::new();
    let changed_slot = &mut changed;
    let reply = key
        .run_prepared(
            principal,
            body,
            async || keys::uncache_before(&st.db, &auth, principal, id, cascade).await,
            async move |txn, _acting, ()| {
                let (m, cascaded) = match change {
                    StatusChange::Revoke { cascade } => {
                        let r = keys::revoke(txn, &caller, id, reason, cascade).await?;
                        changed_slot.extend(r.cascaded.iter().map(|k| k.id));
                        let ids = r.cascaded.iter().map(|k| k.id.to_string()).collect();
                        (r.key, cascade.then_some(ids))
                    }
                    StatusChange::Delete => (keys::delete(txn, &caller, id, reason).await?, None),
                };
                changed_slot.push(m.id);
                Ok(Outcome::new(KeyStatusResult {
                    cascaded_key_ids: cascaded,
                    key_id: m.id.to_string(),
                    status: m.status.as_str().to_string(),
                    revoked_at: matches!(change, StatusChange::Revoke { .. })
                        .then_some(m.revoked_at)
                        .flatten()
                        .map(ts),
                    deleted_at: m.deleted_at.map(ts),
                }))
            },
        )
        .await?;
    keys::uncache(&auth, &changed).await?;
    Ok(reply)
}
