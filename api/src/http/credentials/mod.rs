//! Credentials: API keys (`keys`), terminal tokens (`token`) and the terminal heartbeat
//! that checks one (`terminal`).
pub mod keys;
pub mod terminal;
pub mod token;
