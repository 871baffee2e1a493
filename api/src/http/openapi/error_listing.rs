//! Each operation's errors, as the document lists them: one response per status, naming its
//! codes (`x-error-codes`) with what each means. The codes come from the operation's shape
//! and from `ERRORS`; the suite checks every error it meets against the list
//! (`tests/src/documented_errors.rs`).
use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::error::ErrorCode;

/// The codes an operation answers beyond those its shape implies (`error_codes`), by
/// operationId. The suite holds the document to the service: every error it meets must be
/// listed here or implied (`tests/src/documented_errors.rs`).
pub const ERRORS: &[(&str, &[ErrorCode])] = {
    use ErrorCode::*;
    // What a payment-like decision can refuse: the credential, the money, the program.
    const PAYS: &[ErrorCode] = &[
        NotFound,
        OtpExpired,
        OtpInvalid,
        CredentialExpiredOrReplayed,
        InsufficientFunds,
        CredentialTypeUnsupported,
        RequiresDynamicCredential,
        CurrencyNotSupported,
        WalletProgramAmbiguous,
    ];
    // Naming a customer by an identity credential, in a program.
    const NAMES_CUSTOMER: &[ErrorCode] = &[
        NotFound,
        CredentialTypeUnsupported,
        CurrencyNotSupported,
        WalletProgramAmbiguous,
    ];
    &[
        ("paymentAuthorize", PAYS),
        ("checkRedeemBalance", PAYS),
        ("sendPaymentOtp", NAMES_CUSTOMER),
        ("mintQr", NAMES_CUSTOMER),
        ("identifyCustomer", NAMES_CUSTOMER),
        ("identifyCheckoutSession", NAMES_CUSTOMER),
        ("lookupCustomer", NAMES_CUSTOMER),
        ("openCheckoutSession", &[NotFound]),
        ("enrollInitiate", NAMES_CUSTOMER),
        (
            "enrollVerify",
            &[NotFound, OtpInvalid, CredentialExpiredOrReplayed],
        ),
        ("enrollResend", &[NotFound]),
        ("createClaim", NAMES_CUSTOMER),
        ("confirmTopup", NAMES_CUSTOMER),
        ("topupSku", NAMES_CUSTOMER),
        ("registerSku", &[CurrencyNotSupported]),
        ("ingestSettlement", &[CurrencyNotSupported, Conflict]),
        ("armOffer", NAMES_CUSTOMER),
        ("evaluateOffers", NAMES_CUSTOMER),
        ("createBudget", &[CurrencyNotSupported]),
        ("updateBudget", &[Conflict]),
        ("setCashbackRule", &[NotFound, CurrencyNotSupported]),
        ("getCashbackRule", &[NotFound]),
        ("setReloadBonusConfig", &[NotFound, CurrencyNotSupported]),
        ("getReloadBonusConfig", &[NotFound]),
        ("operatorImportWallet", &[NotFound, WalletProgramAmbiguous]),
        (
            "operatorAdjustWallet",
            &[InsufficientFunds, CurrencyNotSupported],
        ),
        ("operatorIssueGrant", &[CurrencyNotSupported]),
        ("openDispute", &[Conflict]),
        ("resolveDispute", &[Conflict]),
        // Sandbox routes do not exist for a live key.
        ("getSandboxClock", &[NotFound]),
        ("advanceSandboxClock", &[NotFound]),
        ("listSandboxMessages", &[NotFound]),
    ]
};

/// What an error code means, as each operation's responses describe it.
fn meaning(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::InvalidApiKey => {
            "the credential is missing, unknown, expired or of another scheme (`details` says which the route takes)"
        }
        ErrorCode::Forbidden => {
            "the credential may not act here (scope, permission, or a PENDING_PROOF wallet paying)"
        }
        ErrorCode::NotFound => {
            "no such resource for this caller (another tenant's is the same as none)"
        }
        ErrorCode::ValidationError => {
            "the request breaks the schema or a rule (`details.fields`); nothing changed"
        }
        ErrorCode::InsufficientFunds => {
            "actual money plus released promotions cannot cover the debit"
        }
        ErrorCode::IdempotencyKeyReused => "this Idempotency-Key was used with another body",
        ErrorCode::Conflict => {
            "a concurrent change won (or the same Idempotency-Key is still running): re-read and retry"
        }
        ErrorCode::RateLimited => "too many requests (Retry-After and X-RateLimit-* say when)",
        ErrorCode::CurrencyNotSupported => {
            "no active program for the currency (`details.supported`)"
        }
        ErrorCode::WalletProgramAmbiguous => {
            "several programs fit: pass a `wallet_program_id` from `details.candidates`"
        }
        ErrorCode::CredentialTypeUnsupported => {
            "the credential type is not enabled (`details.supported`)"
        }
        ErrorCode::RequiresDynamicCredential => {
            "a static identifier cannot pay: collect an OTP, QR or short code"
        }
        ErrorCode::InternalServerError => {
            "a service error (500) or a dependency briefly unavailable (503, `details.subsystem`): retry with the same Idempotency-Key"
        }
        ErrorCode::OtpExpired => "the OTP expired or was used: send a new one",
        ErrorCode::OtpInvalid => "wrong code, or an OTP sent for another order, amount or currency",
        ErrorCode::CredentialExpiredOrReplayed => {
            "the QR nonce or short code expired or was used: mint a new one"
        }
        ErrorCode::InvalidSignature => "a webhook signature or timestamp failed",
    }
}

/// The read-shaped POSTs: they take an optional Idempotency-Key only to check it, write
/// nothing and keep no answer, so a key can be neither reused nor still running there.
const READ_SHAPED: [&str; 2] = ["checkRedeemBalance", "evaluateOffers"];

fn id(op: &Value) -> &str {
    op["operationId"].as_str().unwrap_or_default()
}

/// The errors operation `op` can answer, by status: those its shape implies (any
/// operation can fail inside; a credential can be refused; parameters and a body can be
/// invalid; an Idempotency-Key can be reused or still running; a path id can name nothing)
/// and those `ERRORS` lists for it.
fn error_codes(op: &Value) -> BTreeMap<u16, Vec<ErrorCode>> {
    let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    let mut add = |status: u16, code: ErrorCode| {
        let codes = by_status.entry(status).or_default();
        if !codes.contains(&code) {
            codes.push(code);
        }
    };
    add(500, ErrorCode::InternalServerError);
    add(503, ErrorCode::InternalServerError);
    let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
    if secured {
        add(401, ErrorCode::InvalidApiKey);
        add(403, ErrorCode::Forbidden);
        add(429, ErrorCode::RateLimited);
    }
    let params = op["parameters"].as_array().cloned().unwrap_or_default();
    let body = op.get("requestBody").is_some();
    if body || !params.is_empty() {
        add(400, ErrorCode::ValidationError);
    }
    if body {
        add(413, ErrorCode::ValidationError);
        add(415, ErrorCode::ValidationError);
    }
    if params.iter().any(|p| p["name"] == "Idempotency-Key") && !READ_SHAPED.contains(&id(op)) {
        add(409, ErrorCode::Conflict);
        add(422, ErrorCode::IdempotencyKeyReused);
    }
    if params.iter().any(|p| p["in"] == "path") {
        add(404, ErrorCode::NotFound);
    }
    let id = id(op);
    for (_, codes) in ERRORS.iter().filter(|(o, _)| *o == id) {
        for c in *codes {
            add(c.status(), *c);
        }
    }
    by_status
}

/// Replaces the generic 4XX and 5XX answers with one response per status, naming its codes
/// (`x-error-codes`, and each with its meaning in the description).
pub fn list_errors(op: &mut Value) {
    let codes = error_codes(op);
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    let envelope = responses
        .remove("4XX")
        .and_then(|r| r.get("content").cloned());
    responses.remove("5XX");
    for (status, codes) in codes {
        let lines: Vec<String> = codes
            .iter()
            .map(|c| format!("`{}`: {}.", c.as_str(), meaning(*c)))
            .collect();
        let mut r = json!({
            "description": lines.join(" "),
            "x-error-codes": codes.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        });
        if let Some(content) = &envelope {
            r["content"] = content.clone();
        }
        responses.insert(status.to_string(), r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::openapi::build;

    /// Every operation lists its errors by status, each with its codes; none is left to a
    /// 4XX or 5XX range, and the table names no operation that is gone.
    #[test]
    fn every_operation_lists_its_error_codes_by_status() {
        let info = build();
        for item in info.document["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let responses = op["responses"].as_object().unwrap();
                assert!(!responses.contains_key("4XX") && !responses.contains_key("5XX"));
                for (status, r) in responses.iter().filter(|(s, _)| !s.starts_with('2')) {
                    let codes = r["x-error-codes"].as_array().unwrap();
                    assert!(!codes.is_empty(), "{} {status}", op["operationId"]);
                }
                assert!(responses.contains_key("500"));
            }
        }
        for (id, _) in ERRORS {
            assert!(
                info.operations.iter().any(|o| o.operation_id == *id),
                "{id} is not an operation"
            );
        }
    }
}
