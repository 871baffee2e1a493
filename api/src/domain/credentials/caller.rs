//! Who is calling a domain operation, once authenticated and scope-checked: what every
//! operation that acts for a merchant takes. A leaf, so that domain modules share it without
//! importing each other.
use uuid::Uuid;

use crate::domain::credentials::scope::Acting;

/// Who is calling, once authenticated and scope-checked.
#[derive(Clone, Debug)]
pub struct Caller {
    pub integration_id: Uuid,
    pub is_sandbox: bool,
    pub acting: Acting,
    pub terminal_id: Option<String>,
    /// The correlation id of a decision (identification, payment), the caller's or one the
    /// service issued; kept in the decision's events so support can find it.
    pub decision_trace_id: Option<String>,
    /// The time the caller's rules run at (its integration's test clock in the sandbox).
    pub clock: crate::domain::sandbox::clock::Clock,
}

impl Caller {
    /// Now, by the caller's clock.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }
}
