//! API keys and operator credentials, sessions and audit log.
pub mod api_keys;
pub mod operators;
