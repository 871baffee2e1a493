//! How a payment names its credential (OTP session, QR nonce, short code) and the customer
//! a credential belongs to: the request shapes, and their reading into the domain's.
use poem_openapi::{Object, Union};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::http::pipeline::common::phone;
use crate::http::pipeline::fields::{SmsCode, UuidText};
use crate::{
    domain::{
        payments::{self, Credential},
        validate::{self, Errors},
    },
    error::ApiError,
};

/// Names the customer by an identity credential.
#[derive(Object, Deserialize, Debug, Clone, Default)]
pub struct CustomerCredential {
    /// `phone` (the only type this version resolves for a mint).
    #[serde(default)]
    pub credential_type: crate::http::pipeline::fields::Field<
        crate::http::pipeline::fields::OneOf<crate::http::pipeline::fields::MintCredentialTypes>,
    >,
    /// E.164.
    #[serde(default)]
    pub phone: crate::http::pipeline::fields::Phone,
}

/// A one-time code the customer received by SMS.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OtpCredential {
    /// E.164.
    pub phone: crate::http::pipeline::fields::Phone,
    /// The 6 digits from the SMS.
    pub otp_code: SmsCode,
    /// From `POST /payments/otp/send`.
    pub otp_session_id: UuidText,
}

/// An OTP session a balance check looks at: its code is never verified there, so only the
/// session is needed.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OtpSessionCredential {
    /// E.164; when given, checked like a payment's.
    #[oai(nullable)]
    pub phone: Option<crate::http::pipeline::fields::Phone>,
    /// Ignored by the check; when given, still 6 digits.
    #[oai(nullable)]
    pub otp_code: Option<SmsCode>,
    /// From `POST /payments/otp/send`.
    pub otp_session_id: UuidText,
}

/// A rotating single-use QR nonce from `POST /qr/mint`.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct QrCredential {
    /// The scanned QR content, as minted.
    pub qr_payload: crate::http::pipeline::fields::QrPayload,
}

/// The 5-character code of a QR mint, read out by the customer.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ShortCodeCredential {
    pub short_code: crate::http::pipeline::fields::ShortCode,
}

/// The payment credential, by `type`: a dynamic credential, one that proves the customer
/// is at the till now. New types are added to this union without a new route;
/// `GET /capabilities` lists the enabled ones (`supported_payment_credential_types`).
///
/// A static identifier of the customer (`phone`, `card_fingerprint`,
/// `provider_customer_id`, `wallet_user_id`: anyone who knows it could present it) is
/// refused with 422 REQUIRES_DYNAMIC_CREDENTIAL, `details.accepted` listing the dynamic
/// types: collect an OTP, QR or short code and retry. `pass_tap`, in the contract's union,
/// is not enabled in this version (no passes are issued), so it is not listed here and
/// answers 422 CREDENTIAL_TYPE_UNSUPPORTED with `details.supported`, as does any other
/// unknown type.
#[derive(Union, Debug, Clone)]
#[oai(discriminator_name = "type", one_of = true)]
pub enum PaymentCredential {
    #[oai(mapping = "otp")]
    Otp(OtpCredential),
    #[oai(mapping = "qr")]
    Qr(QrCredential),
    #[oai(mapping = "short_code")]
    ShortCode(ShortCodeCredential),
}

/// A payment credential as a balance check takes it: `POST /payments`'s, except that an
/// `otp` credential needs only its session.
#[derive(Union, Debug, Clone)]
#[oai(discriminator_name = "type", one_of = true)]
pub enum CheckedCredential {
    #[oai(mapping = "otp")]
    Otp(OtpSessionCredential),
    #[oai(mapping = "qr")]
    Qr(QrCredential),
    #[oai(mapping = "short_code")]
    ShortCode(ShortCodeCredential),
}

/// A payment credential, once `validate_credential` passed. A static identifier is
/// REQUIRES_DYNAMIC_CREDENTIAL; an unknown or disabled type CREDENTIAL_TYPE_UNSUPPORTED.
pub(crate) fn parse_credential(raw: &Value) -> Result<Credential, ApiError> {
    let kind = raw.get("type").and_then(Value::as_str).unwrap_or_default();
    let field = |k: &str| {
        raw.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match kind {
        "otp" => Ok(Credential::Otp {
            phone: validate::normalize_phone(&field("phone")).unwrap_or_default(),
            otp_code: field("otp_code"),
            otp_session_id: Uuid::parse_str(&field("otp_session_id")).unwrap_or_default(),
        }),
        "qr" => Ok(Credential::Qr {
            qr_payload: field("qr_payload"),
        }),
        "short_code" => Ok(Credential::ShortCode {
            short_code: field("short_code").to_ascii_uppercase(),
        }),
        _ => {
            let enabled: Vec<String> = payments::ENABLED_CREDENTIALS
                .iter()
                .map(|s| s.to_string())
                .collect();
            Err(if payments::STATIC_IDENTIFIERS.contains(&kind) {
                ApiError::requires_dynamic_credential(kind, &enabled)
            } else {
                ApiError::credential_type_unsupported(&enabled)
            })
        }
    }
}

/// Field errors of a payment credential. `to_pay` false (the balance check): an OTP
/// credential needs only its session, as its code is not verified there.
pub(crate) fn validate_credential(e: &mut Errors, raw: &Value, to_pay: bool) {
    if !raw.is_object() {
        e.push(
            "/credential",
            "required",
            "is required: an object with a type",
        );
        return;
    }
    let Some(kind) = raw.get("type").and_then(Value::as_str) else {
        e.push("/credential/type", "required", "is required");
        return;
    };
    let text = |e: &mut Errors, k: &str| -> Option<String> {
        match raw.get(k) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            None | Some(Value::Null) if !to_pay && ["phone", "otp_code"].contains(&k) => None,
            Some(Value::String(_)) | None | Some(Value::Null) => {
                e.push(format!("/credential/{k}"), "required", "is required");
                None
            }
            Some(_) => {
                e.push(
                    format!("/credential/{k}"),
                    "invalid_type",
                    "must be a string",
                );
                None
            }
        }
    };
    match kind {
        "otp" => {
            if let Some(p) = text(e, "phone") {
                phone(e, "/credential/phone", &p);
            }
            if let Some(code) = text(e, "otp_code") {
                SmsCode::new(code).check(e, "/credential/otp_code");
            }
            if let Some(id) = text(e, "otp_session_id") {
                UuidText::new(id).check(e, "/credential/otp_session_id");
            }
        }
        "qr" => {
            if let Some(p) = text(e, "qr_payload") {
                crate::http::pipeline::fields::QrPayload::new(p).check(e, "/credential/qr_payload");
            }
        }
        "short_code" => {
            if let Some(c) = text(e, "short_code") {
                crate::http::pipeline::fields::ShortCode::new(c).check(e, "/credential/short_code");
            }
        }
        // Unknown and disabled types are answered by `credential()` after validation.
        _ => {}
    }
}
