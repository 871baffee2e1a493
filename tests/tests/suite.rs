//! The black-box suite: one binary, modules named after the domain they check.
mod suite {
    pub mod contract;
    pub mod customers;
    pub mod disputes;
    pub mod edge;
    pub mod enrollment;
    pub mod envelope;
    pub mod history;
    pub mod incentives;
    pub mod jobs;
    pub mod keys;
    pub mod lifecycle;
    pub mod offers;
    pub mod openapi;
    pub mod operators;
    pub mod outages;
    pub mod payments;
    pub mod payments_concurrency;
    pub mod permissions;
    pub mod platform;
    pub mod settlements_concurrency;
    pub mod tokens;
    pub mod topups;
    pub mod transactions;
    pub mod webhooks;
    pub mod writes;
}
