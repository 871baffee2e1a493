//! What every layer may use and none of them owns: the key-value store (Redis, or its
//! in-process stand-in), rate limits, sealing and hashing, secrets, the
//! request id, logging, the command lines' output, the wallet queue of this process, and small caches. Nothing here
//! knows a business rule or an HTTP route, and nothing here imports a layer above it.
pub mod cache;
pub mod crypto;
pub mod current_request;
pub mod kv;
pub mod ratelimit;
pub mod secret;
pub mod stdout;
pub mod telemetry;
pub mod timestamp;
pub mod wallet_queue;
