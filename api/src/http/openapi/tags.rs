use poem_openapi::Tags;

/// The contract's domains; every operation carries one.
#[derive(Tags)]
#[allow(clippy::enum_variant_names)]
pub enum Tag {
    /// Discovery: health, capabilities, the OpenAPI document.
    #[oai(rename = "platform")]
    Platform,
    /// Key lifecycle and terminal tokens.
    #[oai(rename = "auth")]
    Auth,
    /// Wallet payments, their credentials (OTP, QR, short code), voids and refunds.
    #[oai(rename = "payments")]
    Payments,
    /// Identifying customers at the till and the cashier panel's lookup.
    #[oai(rename = "customers")]
    Customers,
    /// Phone proof for new customers, and claiming locked grants.
    #[oai(rename = "enrollment")]
    Enrollment,
    /// One interaction at the till: identity and basket attach to it, a payment completes it.
    #[oai(rename = "checkout_session")]
    CheckoutSession,
    /// SKU registration and top-ups.
    #[oai(rename = "topup")]
    Topup,
    /// Promotional grants, cashback, campaign budgets and offers.
    #[oai(rename = "incentives")]
    Incentives,
    /// Reconciliation: the integration's transactions feed and detail, disputes and
    /// detaching a receipt from its customer.
    #[oai(rename = "transactions")]
    Transactions,
    /// Webhook endpoints, signed event delivery and its history.
    #[oai(rename = "webhooks")]
    Webhooks,
    /// Stored-value accounting: liability at an instant, roll-forwards and report runs.
    #[oai(rename = "reporting")]
    Reporting,
    /// Risk controls: the velocity limits a merchant sets.
    #[oai(rename = "risk")]
    Risk,
}
