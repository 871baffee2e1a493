#!/usr/bin/env python3
"""The accounting benchmark's client (bench/accounting/run.sh): times the liability at random
instants and report runs against a running service, over plain HTTP on loopback, and prints
one JSON object. Standard library only.

  measure.py liability BASE INTEGRATION MERCHANT KEY --instants N --since RFC3339 [--seed S]
  measure.py liability BASE INTEGRATION MERCHANT KEY --instants N --now   (as_of left out)
  measure.py report BASE INTEGRATION MERCHANT KEY --body JSON [--pids API,WORKER]
  measure.py policy BASE INTEGRATION MERCHANT KEY --body JSON
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone


def connect(base):
    u = urllib.parse.urlparse(base)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=600)


def call(conn, method, path, key, body=None):
    headers = {"x-api-key": key}
    data = None
    if body is not None:
        headers["content-type"] = "application/json"
        headers["idempotency-key"] = str(uuid.uuid4())
        data = json.dumps(body)
    conn.request(method, "/v1" + path, body=data, headers=headers)
    r = conn.getresponse()
    raw = r.read()
    return r.status, raw


def envelope(merchant, extra):
    body = {
        "meta": {"partner_request_id": str(uuid.uuid4()), "api_version": "2026-06-01"},
        "context": {"merchant_id": merchant, "terminal_id": "bench"},
    }
    body.update(extra)
    return body


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def liability(a):
    conn = connect(a.base)
    rng = random.Random(a.seed)
    since = datetime.fromisoformat(a.since) if a.since else None
    now = datetime.now(timezone.utc)
    span = (now - since).total_seconds() if since else 0
    # One untimed call first: the key's bcrypt check (once a minute per key, then cached)
    # and the connection's set-up are the API's, not the liability's. Reported apart.
    t0 = time.perf_counter()
    call(conn, "GET", f"/{a.integration}/liability?" + urllib.parse.urlencode({"merchant_id": a.merchant}), a.key)
    warmup_ms = (time.perf_counter() - t0) * 1000
    ms, lines, errors = [], [], []
    for _ in range(a.instants):
        params = {"merchant_id": a.merchant}
        if not a.now:
            t = since + timedelta(seconds=rng.random() * span)
            params["as_of"] = t.isoformat(timespec="microseconds")
        q = urllib.parse.urlencode(params)
        t0 = time.perf_counter()
        status, raw = call(conn, "GET", f"/{a.integration}/liability?{q}", a.key)
        ms.append((time.perf_counter() - t0) * 1000)
        if status != 200:
            errors.append(f"{status} {raw[:200]!r}")
            continue
        lines.append(json.loads(raw)["data"]["merchants"])
    return {
        "instants": a.instants,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(pct(ms, 99), 1),
        "max_ms": round(max(ms), 1),
        "warmup_ms": round(warmup_ms, 1),
        "last_holders": lines[-1][0]["wallets_holding"] if lines and lines[-1] else None,
    }


def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def report(a):
    conn = connect(a.base)
    pids = [int(p) for p in a.pids.split(",") if p] if a.pids else []
    before = {p: rss_kib(p) for p in pids}
    peak = dict(before)
    done = threading.Event()

    def sample():
        while not done.is_set():
            for p in pids:
                peak[p] = max(peak[p], rss_kib(p))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    status, raw = call(conn, "POST", f"/{a.integration}/reports", a.key, envelope(a.merchant, json.loads(a.body)))
    if status != 202:
        done.set()
        return {"error": f"{status} {raw[:300]!r}"}
    rid = json.loads(raw)["data"]["report_id"]
    while True:
        status, raw = call(conn, "GET", f"/{a.integration}/reports/{rid}", a.key)
        run = json.loads(raw)["data"]
        if run["status"] in ("succeeded", "failed"):
            break
        time.sleep(0.05)
    secs = time.perf_counter() - t0
    done.set()
    sampler.join()
    return {
        "status": run["status"],
        "error": run.get("error"),
        "seconds": round(secs, 2),
        "rows": run.get("row_count"),
        "bytes": run.get("byte_size"),
        "rss_before_mib": [round(before[p] / 1024, 1) for p in pids],
        "rss_peak_mib": [round(peak[p] / 1024, 1) for p in pids],
    }


def policy(a):
    conn = connect(a.base)
    status, raw = call(conn, "PUT", f"/{a.integration}/accounting/policy", a.key, envelope(a.merchant, json.loads(a.body)))
    return {"status": status, "body": json.loads(raw)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["liability", "report", "policy"])
    for name in ("base", "integration", "merchant", "key"):
        p.add_argument(name)
    p.add_argument("--instants", type=int, default=200)
    p.add_argument("--since")
    p.add_argument("--now", action="store_true")
    p.add_argument("--seed", type=int, default=47)
    p.add_argument("--body")
    p.add_argument("--pids")
    a = p.parse_args()
    out = {"liability": liability, "report": report, "policy": policy}[a.what](a)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
