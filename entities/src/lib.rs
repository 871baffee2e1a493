//! sea-orm entities shared by the API, the worker and the tests. One file per table.
pub mod api_key;
pub mod branch;
pub mod brand;
pub mod dead_letter;
pub mod enterprise;
pub mod idempotency_record;
pub mod integration;
pub mod integration_enterprise;
pub mod operator;
pub mod operator_audit;
pub mod outbox;
pub mod resource_sequence;
pub mod sandbox_message;
pub mod wallet_program;
