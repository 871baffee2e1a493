//! Requests built from the spec alone, as a partner's engineer codes them: each test is one
//! of the spec's sentences (issue 26), grouped by the rule it checks.
mod balance_check;
mod checkout;
mod credentials;
mod envelope;
mod limits;
mod lists;
