//! What a key may do, beside where (its scope). Each x-api-key route needs one permission;
//! a key is given its set at creation and the set never grows: a minted key gets only
//! permissions its creator holds, and a key may revoke, regenerate or delete only keys
//! that hold nothing it lacks (regenerating a wider key would hand its caller a raw key
//! worth more than its own).
//!
//! The spec names the key-lifecycle permissions ("integrations CREATE / READ / UPDATE /
//! DELETE"); the others are this service's, one per area of the control plane.
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ApiError;

/// One permission. The order of the variants is the order lists print them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Permission {
    /// POST /auth/keys.
    IntegrationsCreate,
    /// GET /auth/keys.
    IntegrationsRead,
    /// Revoke and regenerate a key.
    IntegrationsUpdate,
    /// Delete a key.
    IntegrationsDelete,
    /// Token exchange, and the terminal calls a key may make itself (identify, customer
    /// look-up, offers, payment and grant reads, the sandbox inbox).
    Terminal,
    /// The transactions feed and its details.
    Reporting,
    /// Settlement ingest and reads.
    Settlements,
    /// SKU registration and listing.
    Catalog,
    /// Reload-bonus and cashback configuration, incentive budgets.
    Incentives,
    /// Webhook subscriptions, their secrets and deliveries.
    Webhooks,
    /// Corrections after the fact that move money back: disputes of a transaction, and
    /// detaching a top-up from a customer.
    Corrections,
    /// Risk controls: a merchant's velocity limits.
    Risk,
}

pub const ALL: &[Permission] = &[
    Permission::IntegrationsCreate,
    Permission::IntegrationsRead,
    Permission::IntegrationsUpdate,
    Permission::IntegrationsDelete,
    Permission::Terminal,
    Permission::Reporting,
    Permission::Settlements,
    Permission::Catalog,
    Permission::Incentives,
    Permission::Webhooks,
    Permission::Corrections,
    Permission::Risk,
];

/// The names of `ALL`, in its order (what a key's creator writes).
pub const NAMES: &[&str] = &[
    "integrations:create",
    "integrations:read",
    "integrations:update",
    "integrations:delete",
    "terminal",
    "reporting",
    "settlements",
    "catalog",
    "incentives",
    "webhooks",
    "corrections",
    "risk",
];

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::IntegrationsCreate => "integrations:create",
            Permission::IntegrationsRead => "integrations:read",
            Permission::IntegrationsUpdate => "integrations:update",
            Permission::IntegrationsDelete => "integrations:delete",
            Permission::Terminal => "terminal",
            Permission::Reporting => "reporting",
            Permission::Settlements => "settlements",
            Permission::Catalog => "catalog",
            Permission::Incentives => "incentives",
            Permission::Webhooks => "webhooks",
            Permission::Corrections => "corrections",
            Permission::Risk => "risk",
        }
    }

    pub fn parse(s: &str) -> Option<Permission> {
        ALL.iter().copied().find(|p| p.as_str() == s)
    }

    fn bit(self) -> u16 {
        1 << ALL.iter().position(|p| *p == self).unwrap_or(0)
    }
}

/// A set of permissions.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Permissions(u16);

impl Permissions {
    /// Every permission: the integration's platform key, and every key made before
    /// permissions existed (any key could then do everything within its scope).
    pub fn all() -> Permissions {
        Permissions::of(ALL)
    }

    /// What a per-merchant key gets when its creator names no set: the till and the
    /// reconciliation feed, never key management.
    pub fn merchant_default() -> Permissions {
        Permissions::of(&[Permission::Terminal, Permission::Reporting])
    }

    pub fn of(ps: &[Permission]) -> Permissions {
        Permissions(ps.iter().fold(0, |acc, p| acc | p.bit()))
    }

    pub fn has(self, p: Permission) -> bool {
        self.0 & p.bit() != 0
    }

    pub fn intersect(self, other: Permissions) -> Permissions {
        Permissions(self.0 & other.0)
    }

    /// What `self` holds that `holder` lacks, in list order.
    pub fn beyond(self, holder: Permissions) -> Vec<Permission> {
        self.iter().filter(|p| !holder.has(*p)).collect()
    }

    pub fn iter(self) -> impl Iterator<Item = Permission> {
        ALL.iter().copied().filter(move |p| self.has(*p))
    }

    pub fn names(self) -> Vec<String> {
        self.iter().map(|p| p.as_str().to_string()).collect()
    }

    /// The stored form: names separated by spaces, in list order.
    pub fn to_column(self) -> String {
        self.names().join(" ")
    }

    /// Reads the stored form; a name this version does not know is ignored (a newer
    /// replica may have written it), so a key never gains anything by it.
    pub fn from_column(s: &str) -> Permissions {
        Permissions::of(
            &s.split_whitespace()
                .filter_map(Permission::parse)
                .collect::<Vec<_>>(),
        )
    }

    /// 403 FORBIDDEN naming the permission this call needs, unless the set holds it.
    pub fn require(self, p: Permission) -> Result<(), ApiError> {
        if self.has(p) {
            Ok(())
        } else {
            Err(missing(&[p]))
        }
    }
}

/// 403 FORBIDDEN naming each permission the caller lacks.
pub fn missing(ps: &[Permission]) -> ApiError {
    let names: Vec<&str> = ps.iter().map(|p| p.as_str()).collect();
    ApiError::forbidden(format!(
        "The credential lacks the permission{} {}.",
        if names.len() == 1 { "" } else { "s" },
        names.join(", ")
    ))
    .with_details(serde_json::json!({
        "missing_permissions": names,
    }))
}

impl fmt::Debug for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|p| p.as_str()))
            .finish()
    }
}

impl Serialize for Permissions {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Permissions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        Ok(Permissions::of(
            &names
                .iter()
                .filter_map(|n| Permission::parse(n))
                .collect::<Vec<_>>(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_every_permission_in_order() {
        let names: Vec<&str> = ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(names, NAMES);
    }

    #[test]
    fn a_set_round_trips_through_its_column_and_never_gains_an_unknown_name() {
        let s = Permissions::of(&[Permission::Reporting, Permission::IntegrationsRead]);
        assert_eq!(s.to_column(), "integrations:read reporting");
        assert_eq!(Permissions::from_column(&s.to_column()), s);
        assert_eq!(
            Permissions::from_column("reporting everything"),
            Permissions::of(&[Permission::Reporting])
        );
        assert_eq!(Permissions::all().iter().count(), ALL.len());
    }

    #[test]
    fn beyond_lists_what_the_holder_lacks() {
        let holder = Permissions::merchant_default();
        let asked = Permissions::of(&[Permission::Terminal, Permission::IntegrationsCreate]);
        assert_eq!(asked.beyond(holder), vec![Permission::IntegrationsCreate]);
        assert!(holder.beyond(Permissions::all()).is_empty());
    }
}
