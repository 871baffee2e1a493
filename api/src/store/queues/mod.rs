//! The job queue's storage (apalis, PostgreSQL or SQLite) and the dead letters it
//! leaves.
pub mod dead_letters;
pub mod job_queue;
