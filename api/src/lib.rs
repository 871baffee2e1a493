//! The wallet & loyalty partner service: the library behind `wallet-api` and
//! `wallet-worker`. One code path serves both run modes; the mode is chosen by
//! configuration alone (see `config`).
pub mod cache;
pub mod config;
pub mod crypto;
pub mod domain;
pub mod envelope;
pub mod error;
pub mod http;
pub mod idempotency;
pub mod jobs;
pub mod kv;
pub mod openapi31;
pub mod ratelimit;
pub mod request_context;
pub mod secret;
pub mod sms;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod timestamp;
pub mod wallet_queue;

mod startup;

pub use startup::{
    Listener, Server, build_state, migrate, serve, serve_endpoint, serve_from_config,
};
