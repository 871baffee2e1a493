//! How a request names a customer (phone, card fingerprint, short code, provider id, QR),
//! its reading into the domain's credential, and the identification guard every path that
//! resolves a customer passes (rate limit, metering).
use crate::http::pipeline::fields::alternatives::{Alternatives, Branch};
use poem_openapi::{Object, Union};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::domain::credentials::scope::Acting;

use crate::http::pipeline::common::optional_uuid;
use crate::{
    domain::{
        customers::{self, IDENTITY_CREDENTIAL_TYPES, IdentityCredential},
        validate::{self, Errors},
    },
    error::ApiError,
    state::AppState,
};

// --- Identity credential ----------------------------------------------------------------

/// `credential_type` phone: the customer's phone number.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct PhoneIdentity {
    /// E.164 (spaces, dashes and a leading 00 are accepted and normalised).
    pub phone: crate::http::pipeline::fields::Phone,
}

/// `credential_type` card_fingerprint: the fingerprint your acquirer gives a payment card,
/// linked to the customer when their enrollment was verified.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CardFingerprintIdentity {
    /// 8 to 128 printable ASCII characters.
    pub card_fingerprint: crate::http::pipeline::fields::CardFingerprint,
}

/// `credential_type` short_code: the 5-character code of a live QR mint.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ShortCodeIdentity {
    pub short_code: crate::http::pipeline::fields::ShortCode,
}

/// `credential_type` provider_customer_id: your POS's own customer id, linked at
/// enrollment verification.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ProviderCustomerIdentity {
    /// 1 to 128 characters.
    pub provider_customer_id: crate::http::pipeline::fields::Text<1, 128>,
}

/// `credential_type` qr: the payload of a live QR mint (identification does not use it up).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct QrIdentity {
    pub qr_payload: crate::http::pipeline::fields::QrPayload,
}

/// A customer named by one identity credential. The types an integration may use are
/// listed by `GET /capabilities` (`supported_identify_credential_types`); any other is
/// CREDENTIAL_TYPE_UNSUPPORTED with that list.
#[derive(Union, Debug, Clone)]
#[oai(discriminator_name = "credential_type", one_of = true)]
pub enum IdentityCredentialBody {
    #[oai(mapping = "phone")]
    Phone(PhoneIdentity),
    #[oai(mapping = "card_fingerprint")]
    CardFingerprint(CardFingerprintIdentity),
    #[oai(mapping = "short_code")]
    ShortCode(ShortCodeIdentity),
    #[oai(mapping = "provider_customer_id")]
    ProviderCustomerId(ProviderCustomerIdentity),
    #[oai(mapping = "qr")]
    Qr(QrIdentity),
}

/// An identity credential as sent: a known type with its value, or a type this version
/// does not know (answered CREDENTIAL_TYPE_UNSUPPORTED once the integration's list is read).
#[derive(Clone, Debug)]
pub enum Presented {
    Known(IdentityCredential),
    Unknown,
}

impl Presented {
    /// The credential, or CREDENTIAL_TYPE_UNSUPPORTED with the integration's enabled list.
    pub async fn known(
        self,
        state: &AppState,
        integration: Uuid,
    ) -> Result<IdentityCredential, ApiError> {
        match self {
            Presented::Known(c) => Ok(c),
            Presented::Unknown => Err(ApiError::credential_type_unsupported(
                &customers::supported_types(&state.db, integration).await?,
            )),
        }
    }

    /// `known`, counted against the integration's identification budget: every route that
    /// resolves a customer from an identifier (claims, offers, top-ups, ...) shares the
    /// identify limit, so none is a side door for enumerating phones or codes.
    pub async fn guarded(
        self,
        state: &AppState,
        principal: &crate::domain::credentials::Principal,
        acting: &Acting,
    ) -> Result<IdentityCredential, ApiError> {
        let credential = self.known(state, principal.integration_id).await?;
        state
            .guard()
            .before_identifying(principal, acting, &credential)
            .await?;
        Ok(credential)
    }
}

/// Checks the credential object at `at` (a JSON pointer) and returns what it names, or
/// `None` when a field error was pushed.
pub fn identity_credential(e: &mut Errors, at: &str, raw: &Value) -> Option<Presented> {
    if !raw.is_object() {
        e.push(
            at,
            "required",
            "is required: an object with a credential_type",
        );
        return None;
    }
    let Some(kind) = raw.get("credential_type").and_then(Value::as_str) else {
        e.push(format!("{at}/credential_type"), "required", "is required");
        return None;
    };
    if !IDENTITY_CREDENTIAL_TYPES.contains(&kind) {
        return Some(Presented::Unknown);
    }
    let field = match kind {
        "qr" => "qr_payload",
        other => other,
    };
    let pointer = if at.ends_with(':') {
        format!("{at}{field}")
    } else {
        format!("{at}/{field}")
    };
    let value = match raw.get(field) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | Some(Value::Null) | None => {
            e.push(
                pointer,
                "required",
                format!("is required for credential_type {kind}"),
            );
            return None;
        }
        Some(_) => {
            e.push(pointer, "invalid_type", "must be a string");
            return None;
        }
    };
    let parsed = match kind {
        "phone" => match validate::normalize_phone(&value) {
            Some(p) => IdentityCredential::Phone(p),
            None => {
                e.push(
                    pointer,
                    "invalid_phone",
                    "must be an E.164 phone number, e.g. +4915112345678",
                );
                return None;
            }
        },
        "card_fingerprint" => {
            if !crate::http::pipeline::fields::CardFingerprint::new(value.as_str())
                .check(e, &pointer)
            {
                return None;
            }
            IdentityCredential::CardFingerprint(value)
        }
        "short_code" => {
            if !validate::short_code(e, &pointer, &value) {
                return None;
            }
            IdentityCredential::ShortCode(value.to_ascii_uppercase())
        }
        "provider_customer_id" => {
            if !validate::length(e, &pointer, &value, 1, 128)
                || !validate::no_control_chars(e, &pointer, &value)
            {
                return None;
            }
            IdentityCredential::ProviderCustomerId(value)
        }
        _ => {
            if !validate::qr_payload(e, &pointer, &value) {
                return None;
            }
            IdentityCredential::Qr(value)
        }
    };
    Some(Presented::Known(parsed))
}

/// A customer named by `wallet_user_id`, an identity credential, or both (they must agree):
/// checked here, resolved in the transaction by `CustomerNamed::credentials`.
#[derive(Clone, Debug, Default)]
pub struct CustomerNamed {
    by_id: Option<Uuid>,
    by_credential: Option<Presented>,
}

/// The rule of a body that names its customer by `wallet_user_id`, `customer` or both, as
/// published on the body's component `schema`.
pub const fn customer_named(schema: &'static str) -> Alternatives {
    Alternatives {
        schema,
        branches: &[
            Branch {
                given: &["wallet_user_id"],
                absent: &[],
            },
            Branch {
                given: &["customer"],
                absent: &[],
            },
        ],
        field: "/wallet_user_id",
        issue: "required",
        message: "give wallet_user_id or customer (or both, naming the same customer)",
    }
}

impl CustomerNamed {
    /// Reads the customer a body names; `rule` is its body's `customer_named`.
    pub fn parse<S: AsRef<str>>(
        e: &mut Errors,
        rule: &Alternatives,
        wallet_user_id: &Option<S>,
        customer: Option<&Value>,
    ) -> CustomerNamed {
        let by_id = wallet_user_id
            .as_ref()
            .and_then(|id| crate::domain::validate::uuid(e, "/wallet_user_id", id.as_ref()));
        let by_credential = customer.and_then(|c| identity_credential(e, "/customer", c));
        rule.check(e, "", |m| match m {
            "wallet_user_id" => wallet_user_id.is_some(),
            _ => customer.is_some_and(|c| !c.is_null()),
        });
        CustomerNamed {
            by_id,
            by_credential,
        }
    }

    /// What names the customer; an identity credential counts against the identify limit
    /// (`Presented::guarded`).
    pub async fn credentials(
        self,
        st: &AppState,
        principal: &crate::domain::credentials::Principal,
        acting: &Acting,
    ) -> Result<Vec<IdentityCredential>, ApiError> {
        let mut named = Vec::new();
        if let Some(id) = self.by_id {
            named.push(IdentityCredential::WalletUser(id));
        }
        if let Some(c) = self.by_credential {
            named.push(c.guarded(st, principal, acting).await?);
        }
        Ok(named)
    }
}

/// The merchant a read without a body acts for: `merchant_id` when given (checked
/// against the credential), else the only merchant the credential acts for.
pub async fn merchant_of<S: AsRef<str>>(
    st: &AppState,
    principal: &crate::domain::credentials::Principal,
    merchant_id: &Option<S>,
) -> Result<Uuid, ApiError> {
    let mut e = Errors::default();
    let given = optional_uuid(&mut e, "query:merchant_id", merchant_id);
    e.finish()?;
    let merchant = match given.or_else(|| principal.scope.enterprise_id()) {
        Some(m) => m,
        None => {
            let linked = crate::domain::platform::authorized_merchants(&st.db, principal).await?;
            match linked.as_slice() {
                [only] => *only,
                _ => {
                    return Err(ApiError::field(
                        "query:merchant_id",
                        "required",
                        "is required: the credential acts for several merchants",
                    ));
                }
            }
        }
    };
    crate::domain::credentials::scope::authorize(&st.db, principal, merchant, None).await?;
    Ok(merchant)
}
