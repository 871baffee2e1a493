//! Customer identities, their wallets and grants, and enrollments.
pub mod enrollments;
mod for_payment;
pub mod wallets;
