use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The scope a credential acts in. The most specific level wins; a narrower credential can
/// never act above its level.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "snake_case")]
pub enum Scope {
    /// The platform key printed by `tenant create`: every merchant linked to the integration.
    Integration,
    Enterprise {
        enterprise_id: Uuid,
    },
    Brand {
        enterprise_id: Uuid,
        brand_id: Uuid,
    },
    Branch {
        enterprise_id: Uuid,
        brand_id: Uuid,
        branch_id: Uuid,
    },
}

impl From<&Scope> for crate::store::credentials::api_keys::ScopeColumns {
    fn from(s: &Scope) -> Self {
        crate::store::credentials::api_keys::ScopeColumns {
            name: s.name(),
            enterprise_id: s.enterprise_id(),
            brand_id: s.brand_id(),
            branch_id: s.branch_id(),
        }
    }
}

impl Scope {
    pub fn name(&self) -> &'static str {
        match self {
            Scope::Integration => "integration",
            Scope::Enterprise { .. } => "enterprise",
            Scope::Brand { .. } => "brand",
            Scope::Branch { .. } => "branch",
        }
    }

    pub fn enterprise_id(&self) -> Option<Uuid> {
        match self {
            Scope::Integration => None,
            Scope::Enterprise { enterprise_id }
            | Scope::Brand { enterprise_id, .. }
            | Scope::Branch { enterprise_id, .. } => Some(*enterprise_id),
        }
    }

    pub fn brand_id(&self) -> Option<Uuid> {
        match self {
            Scope::Brand { brand_id, .. } | Scope::Branch { brand_id, .. } => Some(*brand_id),
            _ => None,
        }
    }

    pub fn branch_id(&self) -> Option<Uuid> {
        match self {
            Scope::Branch { branch_id, .. } => Some(*branch_id),
            _ => None,
        }
    }

    /// Builds a scope from stored columns; `None` when they are inconsistent.
    pub fn from_parts(
        scope: &str,
        enterprise_id: Option<Uuid>,
        brand_id: Option<Uuid>,
        branch_id: Option<Uuid>,
    ) -> Option<Scope> {
        match (scope, enterprise_id, brand_id, branch_id) {
            ("integration", None, None, None) => Some(Scope::Integration),
            ("enterprise", Some(e), None, None) => Some(Scope::Enterprise { enterprise_id: e }),
            ("brand", Some(e), Some(b), None) => Some(Scope::Brand {
                enterprise_id: e,
                brand_id: b,
            }),
            ("branch", Some(e), Some(b), Some(br)) => Some(Scope::Branch {
                enterprise_id: e,
                brand_id: b,
                branch_id: br,
            }),
            _ => None,
        }
    }

    /// A stable string naming this scope, used to partition idempotency keys so one
    /// merchant's credential can never replay another's response.
    pub fn path(&self) -> String {
        let s = |o: Option<Uuid>| o.map(|u| u.to_string()).unwrap_or_else(|| "*".into());
        format!(
            "{}/{}/{}",
            s(self.enterprise_id()),
            s(self.brand_id()),
            s(self.branch_id())
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    ApiKey,
    TerminalJwt,
}

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub kind: CredentialKind,
    /// The API key, or the key a terminal JWT was minted from.
    pub key_id: Option<Uuid>,
    pub integration_id: Uuid,
    pub scope: Scope,
    pub is_sandbox: bool,
    /// When the credential stops working (key expiry or JWT `exp`).
    #[serde(with = "crate::infra::timestamp::option", default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// What the credential may do. A terminal JWT holds `terminal` alone: only a key with
    /// it can mint one.
    pub permissions: crate::domain::credentials::Permissions,
    /// Only from a terminal JWT, where it was validated at mint time.
    pub cashier_id: Option<String>,
    /// Only from a terminal JWT: the terminal it was minted for.
    #[serde(default)]
    pub terminal_id: Option<String>,
    /// For an integration-scoped key: the merchants linked to the integration, resolved
    /// when the key was verified and cached with it (so the scope guard needs no query).
    #[serde(default)]
    pub linked_merchants: Vec<Uuid>,
    /// The integration's clock, when this request already read it (a terminal JWT's
    /// standing check does). Never cached: a clock advance must reach the next request.
    #[serde(skip)]
    pub clock: Option<crate::domain::sandbox::clock::Clock>,
}

impl Principal {
    /// The time this caller's rules run at: its integration's test clock, real time for a
    /// live credential (`domain::sandbox::clock`).
    pub fn clock(&self) -> crate::domain::sandbox::clock::Clock {
        self.clock
            .unwrap_or(crate::domain::sandbox::clock::Clock::REAL)
    }

    /// Part of an idempotency fingerprint: the same key used by a credential of another
    /// scope (or kind) is a different request, never a replay of this one.
    /// A key of narrower permissions is another credential too, so it can never replay a
    /// wider key's response (a minted raw key, say). A key holding every permission keeps
    /// the form it had before permissions existed, so retries across that upgrade replay.
    pub fn scope_fingerprint(&self) -> String {
        if self.kind == CredentialKind::ApiKey
            && self.permissions != crate::domain::credentials::Permissions::all()
        {
            format!(
                "{:?}:{}:{}",
                self.kind,
                self.scope.path(),
                self.permissions.to_column()
            )
        } else {
            format!("{:?}:{}", self.kind, self.scope.path())
        }
    }

    /// Who made a change, for the audit log: `key:<id>`.
    pub fn actor(&self) -> String {
        match self.key_id {
            Some(k) => format!("key:{k}"),
            None => format!("integration:{}", self.integration_id),
        }
    }

    /// The terminal risk controls count this caller's credentials against: the one signed
    /// into its terminal JWT (`terminal:<id>`), else its API key (`key:<id>`), never a
    /// terminal the request context names, which any caller may change at will.
    pub fn counted_terminal(&self) -> String {
        match (&self.terminal_id, self.key_id) {
            (Some(t), _) => format!("terminal:{t}"),
            (None, Some(k)) => format!("key:{k}"),
            (None, None) => format!("integration:{}", self.integration_id),
        }
    }

    /// 403 FORBIDDEN naming `p` unless this credential holds it.
    pub fn require(
        &self,
        p: crate::domain::credentials::Permission,
    ) -> Result<(), crate::error::ApiError> {
        self.permissions.require(p)
    }
}
