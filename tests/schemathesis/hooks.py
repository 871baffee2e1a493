"""Schemathesis hooks for tests/schemathesis/run.sh (loaded through SCHEMATHESIS_HOOKS).

`positive_data_acceptance_beyond_schema` replaces the built-in `positive_data_acceptance`
(the run excludes that one). It is the same check, with two differences:
- a 400 VALIDATION_ERROR answering schema-valid data passes when *every* field error it
  carries is a rule JSON Schema cannot state, listed below for its operation with the
  reason;
- a refusal whose code is one of the contract's business outcomes (STATE_CODES: the data
  was valid, the state of the tenant says no: an unknown OTP session, a currency the
  tenant does not run, a wallet without the funds) passes. Such codes are never
  VALIDATION_ERROR, so a refusal of the data itself still fails.
Anything else that refuses schema-valid data fails exactly as the built-in check fails it.
"""

import json
import re

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

ANY = re.compile(r".*")

# (operation label pattern, field pattern, issue) -> why JSON Schema cannot say it.
BEYOND_SCHEMA = [
    (ANY, re.compile(r"query:cursor"), "invalid_cursor",
     "a cursor is opaque: only one that a page of the same list returned is one"),
    (ANY, ANY, "must_be_integer",
     "the spec never accepts a decimal-formatted amount (1.0); JSON Schema's integer admits it"),
    (re.compile(r"GET /customers/lookup"), re.compile(r"query:.*"), "exactly_one",
     "exactly one of six alternative query parameters"),
    (re.compile(r"GET /customers/lookup"), re.compile(r"query:.*"), "required",
     "credential_type names which other query parameter must come with it"),
    (re.compile(r"POST /auth/keys"), re.compile(r"/enterprise_id"), "merchant_mismatch",
     "a member compared with context.merchant_id"),
    (re.compile(r"GET /events"), re.compile(r"query:occurred_before"), "invalid_range",
     "one query parameter compared with another"),
    (re.compile(r"GET /events"), re.compile(r"query:resource_(type|id)"), "required",
     "resource_type and resource_id come together"),
    (ANY, ANY, "wallet_limit",
     "a credit past the wallet's holding limit depends on what the wallet already holds"),
    (ANY, re.compile(r"/expires_at"), "not_in_future",
     "a time compared with the time the request arrives"),
    (re.compile(r"POST /enroll/verify"), re.compile(r"/verification_token"), "invalid_token",
     "whether a well-formed token is one this service signed is known by verifying it"),
    (re.compile(r"POST /webhooks/subscriptions"), re.compile(r"/url"), "invalid_url",
     "an absolute http(s) URL whose host resolves to a public address: parsing it as a URL "
     "and resolving its host are beyond a pattern"),
    (re.compile(r"POST /topup/settlements"), re.compile(r"/failure_reason"), "not_allowed",
     "a member allowed only with one value of another (state FAILED)"),
    (re.compile(r"POST /topup/reload-bonus/config"), re.compile(r"/tiers/\d+(/max_amount_minor)?"),
     "invalid_range|overlap", "bands compared with each other and their bounds with each other"),
]

# The contract's codes for valid data the tenant's state refuses (see the docstring).
STATE_CODES = {
    "INSUFFICIENT_FUNDS", "CURRENCY_NOT_SUPPORTED", "WALLET_PROGRAM_AMBIGUOUS",
    "CREDENTIAL_TYPE_UNSUPPORTED", "REQUIRES_DYNAMIC_CREDENTIAL", "OTP_EXPIRED",
    "OTP_INVALID", "CREDENTIAL_EXPIRED_OR_REPLAYED",
    # The key was used before, with another body: schemathesis reuses header values.
    "IDEMPOTENCY_KEY_REUSED",
}


def _listed(label: str, field: str, issue: str) -> bool:
    return any(
        op.fullmatch(label) and f.fullmatch(field) and re.fullmatch(i, issue)
        for op, f, i, _why in BEYOND_SCHEMA
    )


UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _header_was_invalid(case, field: str) -> bool:
    """Schemathesis's coverage phase sends an optional Idempotency-Key of 37 characters as
    if it were valid; every Idempotency-Key the document declares is a UUID (36
    characters), so a refusal of one that is not was a refusal of invalid data."""
    if field != "header:Idempotency-Key":
        return False
    value = (case.headers or {}).get("Idempotency-Key")
    return isinstance(value, str) and not UUID.fullmatch(value)


def _beyond_schema(case, response) -> bool:
    if response.status_code not in (400, 402, 422):
        return False
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    if not isinstance(error, dict):
        return False
    if error.get("code") in STATE_CODES:
        return True
    if error.get("code") != "VALIDATION_ERROR":
        return False
    fields = (error.get("details") or {}).get("fields") or []
    return bool(fields) and all(
        _listed(case.operation.label, str(f.get("field")), str(f.get("issue")))
        or _header_was_invalid(case, str(f.get("field")))
        for f in fields
    )


@schemathesis.check
def positive_data_acceptance_beyond_schema(ctx, response, case):
    """Schema-valid data is accepted, unless refused for a rule listed in BEYOND_SCHEMA."""
    if _beyond_schema(case, response):
        return None
    return positive_data_acceptance(ctx, response, case)
