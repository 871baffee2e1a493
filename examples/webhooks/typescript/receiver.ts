// A webhook receiver for the wallet service in TypeScript, on Node's standard library only
// (node:http, node:crypto). The same steps as every receiver the spec describes:
//   1. read the raw body (the signature covers these exact bytes);
//   2. parse `Service-Signature: t=<unix>,v1=<hex>[,v1=<hex>]`, reject a timestamp outside
//      the tolerance (300 s);
//   3. recompute HMAC-SHA256 over "<t>.<raw body>" with each known secret and compare with
//      every v1 in constant time (during a rotation's overlap either secret verifies);
//   4. deduplicate on event_id: a duplicate is acknowledged with 2xx, not processed again;
//   5. answer 2xx quickly.
//
// Environment: WEBHOOK_SECRETS (comma-separated whsec_... secrets), PORT (127.0.0.1; 0 for
// any free port; default 8090), WEBHOOK_TOLERANCE_SECS (default 300).
// Prints one JSON line per request: {"outcome":"listening","port":N} first, then
// "processed", "duplicate" or "rejected". Build: `npm ci && npx tsc`, run: `node dist/receiver.js`.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, IncomingMessage, ServerResponse } from "node:http";
import { AddressInfo } from "node:net";

const secrets: string[] = (process.env.WEBHOOK_SECRETS ?? "")
  .split(",")
  .map((s) => s.trim())
  .filter((s) => s.length > 0);
const tolerance = Number(process.env.WEBHOOK_TOLERANCE_SECS ?? "300");
const seen = new Set<string>();

interface EventEnvelope {
  event_id: string;
  event_type: string;
  occurred_at: string;
  emitted_at: string;
  merchant_id: string;
  data: Record<string, unknown>;
  sequence_number: number;
}

type Reason = "malformed_signature" | "stale_timestamp" | "bad_signature";

function emit(fields: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(fields) + "\n");
}

/** null when the signature is good, else why it is not. */
export function verify(
  header: string,
  body: Buffer,
  keys: string[],
  now: number,
  toleranceSecs: number,
): Reason | null {
  let t: number | null = null;
  const signatures: Buffer[] = [];
  for (const part of header.split(",")) {
    const [key, value = ""] = part.trim().split("=", 2);
    if (key === "t" && /^\d+$/.test(value)) t = Number(value);
    else if (key === "v1" && /^[0-9a-f]{64}$/.test(value)) signatures.push(Buffer.from(value, "hex"));
  }
  if (t === null || signatures.length === 0) return "malformed_signature";
  if (Math.abs(now - t) > toleranceSecs) return "stale_timestamp";
  for (const key of keys) {
    const expected = createHmac("sha256", key).update(`${t}.`).update(body).digest();
    if (signatures.some((s) => s.length === expected.length && timingSafeEqual(s, expected))) {
      return null;
    }
  }
  return "bad_signature";
}

function answer(res: ServerResponse, status: number, payload: unknown): void {
  const data = JSON.stringify(payload);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) });
  res.end(data);
}

function handle(req: IncomingMessage, res: ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const header = String(req.headers["service-signature"] ?? "");
    const reason = verify(header, body, secrets, Math.floor(Date.now() / 1000), tolerance);
    if (reason !== null) {
      emit({ outcome: "rejected", reason });
      answer(res, 400, { error: "INVALID_SIGNATURE", reason });
      return;
    }
    const event = JSON.parse(body.toString("utf8")) as EventEnvelope;
    const duplicate = seen.has(event.event_id);
    seen.add(event.event_id);
    emit({ outcome: duplicate ? "duplicate" : "processed", event_id: event.event_id, event_type: event.event_type });
    // Process the event here (once per event_id); answer fast, work later if slow.
    answer(res, 200, { received: true });
  });
}

if (secrets.length === 0) {
  process.stderr.write("set WEBHOOK_SECRETS to the subscription's signing secret(s)\n");
  process.exit(2);
}
const server = createServer(handle);
server.listen(Number(process.env.PORT ?? "8090"), "127.0.0.1", () => {
  emit({ outcome: "listening", port: (server.address() as AddressInfo).port });
});
