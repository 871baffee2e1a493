"""The quickstart's flow through the Python client that openapi-python-client generates
from the service's document (package `wallet_client`), type-checked with mypy --strict by
the test suite: merchant key, terminal token, enrollment, SKU top-up, identify, QR,
payment, refund. Environment: WALLET (base URL with /v1), PLATFORM_KEY, MERCHANT_ID.
Prints one JSON line with what it did."""
import json
import os
import sys
import time
import uuid
from typing import Protocol, TypeVar

from wallet_client.api.auth import create_api_key, exchange_terminal_token
from wallet_client.api.customers import identify_customer
from wallet_client.api.enrollment import enroll_initiate, enroll_verify
from wallet_client.api.payments import mint_qr, payment_authorize, refund_payment
from wallet_client.api.platform import list_sandbox_messages
from wallet_client.api.topup import register_sku, topup_sku
from wallet_client.client import AuthenticatedClient
from wallet_client.models import (
    CreateKeyRequest,
    EnrollInitiateRequest,
    EnrollVerifyRequest,
    ErrorEnvelope,
    IdentifyRequest,
    IdentityCredentialBodyPhoneIdentity,
    IdentityCredentialBodyPhoneIdentityCredentialType,
    PaymentCredentialQrCredential,
    PaymentCredentialQrCredentialType,
    PaymentRequest,
    QrMintRequest,
    RefundRequest,
    RequestContext,
    RequestMeta,
    RequestMetaApiVersion,
    SkuRequest,
    SkuTopupRequest,
    TokenRequest,
)
from wallet_client.types import Unset

BASE = os.environ.get("WALLET", "http://127.0.0.1:8080/v1")
MERCHANT = os.environ["MERCHANT_ID"]


class Envelope(Protocol):
    ok: bool


E = TypeVar("E", bound=Envelope)


def ok(what: str, r: E | ErrorEnvelope | None) -> E:
    """The success envelope, or an exception naming the call and the error."""
    if r is None or isinstance(r, ErrorEnvelope) or not r.ok:
        raise SystemExit(f"{what}: {r!r}")
    return r


def key() -> str:
    return str(uuid.uuid4())


def meta() -> RequestMeta:
    return RequestMeta(api_version=RequestMetaApiVersion("2026-06-01"), partner_request_id=key())


def context() -> RequestContext:
    return RequestContext(merchant_id=MERCHANT, terminal_id="till-1")


def with_key(k: str) -> AuthenticatedClient:
    return AuthenticatedClient(base_url=BASE, token=k, prefix="", auth_header_name="x-api-key")


def main() -> None:
    platform = with_key(os.environ["PLATFORM_KEY"])
    created = ok(
        "createApiKey",
        create_api_key.sync(
            client=platform,
            idempotency_key=key(),
            body=CreateKeyRequest(meta=meta(), context=context(), enterprise_id=MERCHANT, label="python POS"),
        ),
    )
    merchant = with_key(created.data.raw_key)
    token = ok(
        "exchangeTerminalToken",
        exchange_terminal_token.sync(
            client=merchant, idempotency_key=key(), body=TokenRequest(meta=meta(), context=context())
        ),
    ).data.token
    till = AuthenticatedClient(base_url=BASE, token=token)

    phone = "+4916" + str(time.time_ns())[-9:]
    ok(
        "enrollInitiate",
        enroll_initiate.sync(
            client=till, idempotency_key=key(), body=EnrollInitiateRequest(context=context(), phone=phone)
        ),
    )
    code: str | None = None
    for _ in range(50):
        inbox = ok("listSandboxMessages", list_sandbox_messages.sync(client=platform, phone=phone))
        first = inbox.data[0].code if inbox.data else None
        if isinstance(first, str):
            code = first
            break
        time.sleep(0.2)
    if code is None:
        raise SystemExit("no enrollment code in the sandbox inbox")
    ok(
        "enrollVerify",
        enroll_verify.sync(client=till, idempotency_key=key(), body=EnrollVerifyRequest(context=context(), code=code)),
    )

    ok(
        "registerSku",
        register_sku.sync(
            client=platform,
            idempotency_key=key(),
            body=SkuRequest(
                meta=meta(), context=context(), sku_id="card-20", name="Gift card 20 EUR",
                currency="EUR", wallet_credits_minor=2000,
            ),
        ),
    )
    customer = IdentityCredentialBodyPhoneIdentity(
        phone=phone, credential_type=IdentityCredentialBodyPhoneIdentityCredentialType.PHONE
    )
    ok(
        "topupSku",
        topup_sku.sync(
            "card-20",
            client=till,
            idempotency_key=key(),
            body=SkuTopupRequest(context=context(), customer=customer, quantity=1, pos_order_ref=key()),
        ),
    )

    who = ok(
        "identifyCustomer",
        identify_customer.sync(
            client=till, idempotency_key=key(), body=IdentifyRequest(meta=meta(), context=context(), credential=customer)
        ),
    ).data
    if not isinstance(who.wallet_user_id, str):
        raise SystemExit(f"identify resolved no wallet: {who!r}")
    qr = ok(
        "mintQr",
        mint_qr.sync(
            client=till,
            idempotency_key=key(),
            body=QrMintRequest(meta=meta(), context=context(), wallet_user_id=who.wallet_user_id),
        ),
    ).data.qr_payload
    payment = ok(
        "createPayment",
        payment_authorize.sync(
            client=till,
            idempotency_key=key(),
            body=PaymentRequest(
                meta=meta(), context=context(),
                credential=PaymentCredentialQrCredential(qr_payload=qr, type_=PaymentCredentialQrCredentialType.QR),
                amount_minor=250, currency="EUR",
            ),
        ),
    ).data
    refund = ok(
        "refundPayment",
        refund_payment.sync(
            payment.payment_id,
            client=till,
            idempotency_key=key(),
            body=RefundRequest(meta=meta(), context=context(), amount_minor=100, currency="EUR", reason="one item returned"),
        ),
    ).data
    before = who.balance.actual_minor if who.balance and not isinstance(who.balance, Unset) else None
    print(
        json.dumps(
            {
                "balance_before_minor": before,
                "payment_id": payment.payment_id,
                "payment_status": str(payment.status),
                "refunded_minor": refund.refund.amount_minor if refund.refund else None,
                "balance_after_minor": refund.balance_after.actual_minor,
            }
        )
    )


if __name__ == "__main__":
    main()
    sys.exit(0)
