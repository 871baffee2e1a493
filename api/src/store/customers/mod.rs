//! Customer identities, their wallets and grants, and enrollments.
pub mod enrollments;
pub mod for_payment;
pub mod wallets;
