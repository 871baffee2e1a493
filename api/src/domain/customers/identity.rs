//! The identity credential types a customer can be resolved by. A leaf: customers resolve
//! them, operators configure which an integration may use, tenancy stores that choice.

/// Every identity credential type this version can resolve, in the contract's order. Which
/// of them an integration may use is its configuration (`GET /capabilities`).
pub const IDENTITY_CREDENTIAL_TYPES: &[&str] = &[
    "phone",
    "card_fingerprint",
    "short_code",
    "provider_customer_id",
    "qr",
];
