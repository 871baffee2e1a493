//! The wallet & loyalty partner service: the library behind `wallet-api` and
//! `wallet-worker`. One code path serves both run modes; the mode is chosen by
//! configuration alone (see `config`).
pub mod cli;
pub mod config;
pub mod console;
pub mod domain;
pub mod envelope;
pub mod error;
pub mod http;
pub mod idempotency;
pub mod infra;
pub mod jobs;
pub mod state;
pub mod store;

mod startup;

pub use startup::{
    Listener, Server, build_state, migrate, serve, serve_from_config, serve_metrics,
};
