//! Closed sets: a `OneOf<S>` field publishes the set as an `enum` and checks it.
use std::{borrow::Cow, marker::PhantomData};

use poem_openapi::registry::MetaSchema;

use crate::domain::validate::{self, Errors};
use crate::http::pipeline::fields::Kind;

/// A closed set of values (`OneOf<S>` publishes them as an `enum`, `validate::one_of`
/// checks them).
pub trait Set: Send + Sync + 'static {
    const NAME: &'static str;
    fn values() -> &'static [&'static str];
}

/// Declares a `Set` over a list of values the domain already holds.
macro_rules! closed_set {
    ($(#[$doc:meta])* $name:ident = $values:expr) => {
        $(#[$doc])*
        pub struct $name;
        impl $crate::http::pipeline::fields::sets::Set for $name {
            const NAME: &'static str = stringify!($name);
            fn values() -> &'static [&'static str] {
                $values
            }
        }
    };
}

pub struct OneOf<S>(PhantomData<S>);

impl<S: Set> Kind for OneOf<S> {
    fn name() -> Cow<'static, str> {
        format!("string_one_of_{}", S::NAME).into()
    }

    fn schema() -> MetaSchema {
        MetaSchema {
            enum_items: S::values().iter().map(|v| (*v).into()).collect(),
            ..MetaSchema::new("string")
        }
    }

    fn check(errs: &mut Errors, field: &str, value: &str) -> bool {
        validate::one_of(errs, field, value, S::values())
    }
}

closed_set!(
    /// A grant's state.
    GrantStates = crate::domain::incentives::grants::STATES
);
closed_set!(
    /// Where a grant came from.
    GrantSources = crate::domain::customers::wallets::GRANT_SOURCES
);
closed_set!(
    /// An offer's state.
    OfferStates = crate::domain::incentives::offers::STATES
);
closed_set!(
    /// A settlement's state as the provider reports it.
    SettlementStates = crate::domain::topups::settlements::STATES
);
closed_set!(
    /// A transaction's status in the partner report.
    TransactionStatuses = crate::domain::transactions::STATUSES
);
closed_set!(
    /// The kinds of money movement the partner report lists.
    TransactionKinds = crate::domain::transactions::KINDS
);
closed_set!(
    /// The event types of the webhook catalog.
    EventTypes = crate::domain::webhooks::EVENT_TYPES
);
closed_set!(
    /// A webhook delivery's outcome.
    DeliveryStates = crate::domain::webhooks::DELIVERY_STATES
);
closed_set!(
    /// How expected breakage is recognised.
    BreakageMethods = crate::domain::ledger::policy::METHODS
);
closed_set!(
    /// The report types a run can make.
    ReportKinds = crate::domain::ledger::reports::KINDS
);
closed_set!(
    /// The file formats of a report.
    ReportFormats = crate::domain::ledger::reports::file::FORMATS
);
closed_set!(
    /// How a dispute ended.
    DisputeOutcomes = crate::domain::transactions::disputes::OUTCOMES
);
closed_set!(
    /// The identity credential types an integration may enable.
    IdentityCredentialTypes = crate::domain::customers::identity::IDENTITY_CREDENTIAL_TYPES
);
closed_set!(
    /// Which way an operator's adjustment moves money.
    AdjustmentDirections = crate::domain::customers::wallets::ADJUSTMENT_DIRECTIONS
);
closed_set!(
    /// The states an operator may give a new grant.
    NewGrantStates = crate::domain::customers::wallets::OPERATOR_GRANT_STATES
);
closed_set!(
    /// What a key may do.
    PermissionNames = crate::domain::credentials::permissions::NAMES
);
closed_set!(
    /// A listed key's state.
    KeyStatuses = crate::domain::credentials::keys::LIST_STATUSES
);
closed_set!(
    /// A dead letter's state.
    DeadLetterStatuses = crate::domain::operators::dead_letters::STATUSES
);
closed_set!(
    /// A job type, each with its own queue of the same name.
    JobQueues = crate::domain::outbox::job_requests::QUEUES
);
closed_set!(
    /// The identity credential types a QR mint resolves.
    MintCredentialTypes = &["phone"]
);
closed_set!(
    /// Whose events a subscription receives.
    MerchantScopes = &["merchant", "integration"]
);
closed_set!(
    /// The states an operator may give an imported identity.
    ImportedIdentityStates = crate::domain::customers::wallets::IMPORTABLE_STATES
);
