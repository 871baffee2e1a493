// The quickstart's flow through the client generated from the service's OpenAPI document
// (openapi-typescript types, openapi-fetch calls), compiled with tsc --strict: if the
// document misstates a path, a parameter, a body or a response, this does not compile or
// does not run. Environment: WALLET (base URL with /v1), PLATFORM_KEY, MERCHANT_ID.
// Prints one JSON line with what it did.
import { randomUUID } from "node:crypto";
import createClient from "openapi-fetch";
import type { paths } from "./generated/schema";

const base = process.env.WALLET ?? "http://127.0.0.1:8080/v1";
const platformKey = process.env.PLATFORM_KEY ?? "";
const merchant = process.env.MERCHANT_ID ?? "";
const client = createClient<paths>({ baseUrl: base });

const meta = () => ({ api_version: "2026-06-01" as const, partner_request_id: randomUUID() });
const context = { merchant_id: merchant, terminal_id: "till-1" };
const idem = () => ({ header: { "Idempotency-Key": randomUUID() } });
const key = (k: string) => ({ "x-api-key": k });
const bearer = (t: string) => ({ Authorization: `Bearer ${t}` });

/** The success envelope's data, or a thrown error naming the call and the error code. */
function ok<T>(what: string, r: { data?: { ok: boolean; data: T }; error?: unknown }): T {
  if (!r.data || !r.data.ok) {
    throw new Error(`${what}: ${JSON.stringify(r.error ?? r.data)}`);
  }
  return r.data.data;
}

async function main(): Promise<void> {
  const created = ok(
    "createApiKey",
    await client.POST("/auth/keys", {
      params: idem(),
      headers: key(platformKey),
      body: { meta: meta(), context, enterprise_id: merchant, label: "typed client POS" },
    }),
  );
  const merchantKey: string = created.raw_key;

  const token = ok(
    "createPosTerminalToken",
    await client.POST("/auth/token", { params: idem(), headers: key(merchantKey), body: { meta: meta(), context } }),
  ).token;

  const phone = `+4915${String(Date.now()).slice(-9)}`;
  ok(
    "enrollInitiate",
    await client.POST("/enroll/initiate", { params: idem(), headers: bearer(token), body: { context, phone } }),
  );
  let code: string | null | undefined;
  for (let i = 0; i < 50 && !code; i++) {
    const messages = ok(
      "listSandboxMessages",
      await client.GET("/sandbox/messages", { params: { query: { phone } }, headers: key(platformKey) }),
    );
    code = messages[0]?.code;
    if (!code) await new Promise((r) => setTimeout(r, 200));
  }
  if (!code) throw new Error("no enrollment code in the sandbox inbox");
  ok("enrollVerify", await client.POST("/enroll/verify", { params: idem(), headers: bearer(token), body: { context, code } }));

  ok(
    "upsertSku",
    await client.POST("/skus", {
      params: idem(),
      headers: key(platformKey),
      body: { meta: meta(), context, sku_id: "card-20", name: "Gift card 20 EUR", currency: "EUR", wallet_credits_minor: 2000 },
    }),
  );
  ok(
    "skuTopup",
    await client.POST("/topup/sku/{sku_id}", {
      params: { ...idem(), path: { sku_id: "card-20" } },
      headers: bearer(token),
      body: { context, customer: { credential_type: "phone", phone }, quantity: 1, pos_order_ref: randomUUID() },
    }),
  );

  const who = ok(
    "identify",
    await client.POST("/identify", {
      params: idem(),
      headers: bearer(token),
      body: { meta: meta(), context, credential: { credential_type: "phone", phone } },
    }),
  );
  const qr = ok(
    "mintQr",
    await client.POST("/qr/mint", {
      params: idem(),
      headers: bearer(token),
      body: { meta: meta(), context, wallet_user_id: who.wallet_user_id },
    }),
  ).qr_payload;
  const payment = ok(
    "createPayment",
    await client.POST("/payments", {
      params: idem(),
      headers: bearer(token),
      body: { meta: meta(), context, credential: { type: "qr", qr_payload: qr }, amount_minor: 250, currency: "EUR" },
    }),
  );
  const refund = ok(
    "refundPayment",
    await client.POST("/payments/{id}/refund", {
      params: { ...idem(), path: { id: payment.payment_id } },
      headers: bearer(token),
      body: { meta: meta(), context, amount_minor: 100, currency: "EUR", reason: "one item returned" },
    }),
  );
  process.stdout.write(
    JSON.stringify({
      balance_before_minor: who.balance?.actual_minor,
      payment_id: payment.payment_id,
      payment_status: payment.status,
      refunded_minor: refund.refund?.amount_minor,
      balance_after_minor: refund.balance_after?.actual_minor,
    }) + "\n",
  );
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
