//! Promotions: reload-bonus tiers, cashback rules, campaign budgets, offers, the
//! promotional grants they create (with their events and expiry) and the rewards a payment
//! earned, which follow it when it is reversed.
pub mod budgets;
pub mod cashback;
pub mod expiry;
pub mod grant_events;
pub mod grants;
pub mod offers;
pub mod reload_bonus;
pub mod rewards;
