//! What the key operations take and answer: the request bodies with their checks, and the
//! views of a key.
use crate::http::pipeline::fields::{
    Cursor, Field, KeyStatuses, List, OneOf, PageLimit, PermissionNames, Text, UuidText,
    alternatives::{Alternatives, Branch},
};
use crate::http::pipeline::query_group::query_group;
use chrono::{DateTime, Utc};
use poem_openapi::Object;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{
    credentials::{
        Permission, Permissions,
        keys::{CreateKey, Key},
    },
    validate::{self, Errors},
};
use crate::http::{
    pipeline::body::Validate,
    pipeline::common::{RequestContext, RequestMeta, ts},
};

query_group! {
    /// Which keys, and the page.
    pub struct KeyQuery {
        /// `active` or `inactive`.
        status: Option<Field<OneOf<KeyStatuses>>> = "status",
        /// Only keys of this branch.
        branch_id: Option<UuidText> = "branch_id",
        /// Only keys minted by this key.
        created_by: Option<UuidText> = "created_by",
        /// 1 to 200, default 50.
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

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
    pub(super) fn to_domain(&self) -> CreateKey {
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
pub(super) fn action_checks(
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

pub(super) fn view(m: &Key) -> ApiKeyView {
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

pub(super) fn created(m: &Key, raw: String) -> ApiKeyCreated {
    ApiKeyCreated {
        key_id: m.id.to_string(),
        raw_key: raw,
        key: view(m),
    }
}
