#!/usr/bin/env python3
"""A webhook receiver for the wallet service, in Python's standard library only.

It does what the spec asks of every receiver, in this order:
  1. read the raw body (the signature covers these exact bytes, not a re-encoding);
  2. parse `Service-Signature: t=<unix>,v1=<hex>[,v1=<hex>]` and reject a timestamp outside
     the tolerance (300 s): a replayed old delivery is refused;
  3. recompute HMAC-SHA256 over "<t>.<raw body>" with each secret it knows and compare
     with every v1 in constant time (after a secret rotation the service signs with the
     new and the previous secret during the overlap, so either secret verifies);
  4. deduplicate on event_id (delivery is at least once): a duplicate is acknowledged
     with 2xx and not processed again;
  5. answer 2xx quickly; anything else makes the service retry.

Settings (environment):
  WEBHOOK_SECRETS  comma-separated signing secrets (whsec_...), e.g. the new and the old
  PORT             port on 127.0.0.1 (0: any free port; default 8090)
  WEBHOOK_TOLERANCE_SECS  default 300

It prints one JSON line per request to stdout: {"outcome": "listening", "port": N} first,
then "processed", "duplicate" or "rejected" with the event or the reason. A real receiver
would keep the seen event ids in its database, in the same transaction as its processing.
"""
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRETS = [s.strip() for s in os.environ.get("WEBHOOK_SECRETS", "").split(",") if s.strip()]
TOLERANCE = int(os.environ.get("WEBHOOK_TOLERANCE_SECS", "300"))
SEEN = set()
SEEN_LOCK = threading.Lock()


def emit(**fields):
    print(json.dumps(fields), flush=True)


def verify(header, body, secrets, now, tolerance):
    """Returns None when the signature is good, else the reason it is not."""
    t, signatures = None, []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            t = int(value)
        elif key == "v1":
            signatures.append(value)
    if t is None or not signatures:
        return "malformed_signature"
    if abs(now - t) > tolerance:
        return "stale_timestamp"
    signed = str(t).encode() + b"." + body
    for secret in secrets:
        expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        if any(hmac.compare_digest(expected, s) for s in signatures):
            return None
    return "bad_signature"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        reason = verify(
            self.headers.get("Service-Signature", ""), body, SECRETS, int(time.time()), TOLERANCE
        )
        if reason is not None:
            emit(outcome="rejected", reason=reason)
            return self.answer(400, {"error": "INVALID_SIGNATURE", "reason": reason})
        event = json.loads(body)
        with SEEN_LOCK:
            duplicate = event["event_id"] in SEEN
            SEEN.add(event["event_id"])
        emit(
            outcome="duplicate" if duplicate else "processed",
            event_id=event["event_id"],
            event_type=event["event_type"],
        )
        # Process the event here (once per event_id); answer fast, work later if slow.
        self.answer(200, {"received": True})

    def answer(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # stdout carries the outcomes only
        pass


def main():
    if not SECRETS:
        sys.exit("set WEBHOOK_SECRETS to the subscription's signing secret(s)")
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8090"))), Handler)
    emit(outcome="listening", port=server.server_address[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
