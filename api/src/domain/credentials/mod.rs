//! Who is calling and what they may act on: API keys, terminal JWTs and their scope.
pub mod api_key;
pub mod authenticate;
pub mod credential_codes;
pub mod guessing;
pub mod jwt;
pub mod keys;
pub mod permissions;
pub mod principal;
pub mod scope;
pub mod standing;
pub mod token;

pub use permissions::{Permission, Permissions};
pub use principal::{CredentialKind, Principal, Scope};
