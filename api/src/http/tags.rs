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
}
