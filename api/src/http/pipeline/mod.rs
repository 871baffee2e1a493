//! What every request passes, whatever its operation: the security schemes (`auth`), the
//! per-request middleware (`middleware`: request id, span, errors as the envelope, metrics),
//! the answers the router does not give on its own (`router_answers`), CORS, the body's
//! strict parsing and validation (`strict_json`, `body`, `fields`), the request envelope
//! (`common`), the one path a mutation takes (`mutation`, `early_replay`), the reply
//! (`reply`, `errors`) and list cursors (`cursor`).
pub mod auth;
pub mod body;
pub mod common;
pub mod cors;
pub mod cursor;
pub mod early_replay;
pub mod errors;
pub mod fields;
pub mod middleware;
pub mod mutation;
pub mod query_group;
pub mod reply;
pub mod router_answers;
pub mod strict_json;
