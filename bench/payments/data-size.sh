#!/usr/bin/env bash
# Data-size benchmark: does a payment cost the same when the history is large? The payments
# benchmark (run.sh) twice in one run, in production mode, first with 100 thousand ledger
# entries already there (10 thousand wallets), then with 10 million (1 million wallets),
# seeded by seed-history.sql; pg-ceiling.sh beside each, loaded with the same history.
# Targets: payments/s at 10 million within 10% of payments/s at 100 thousand, p99 within
# 20%. Also the database's size per million payments.
#
# Writes bench/payments/results/data-size.md (the comparison) and data-size-small.md /
# data-size-large.md (each run's full summary); results/latest.md is left as it was.
#
# Usage: bench/payments/data-size.sh
# Knobs (env): SMALL_WALLETS=10000 LARGE_WALLETS=1000000 SEED_PAYMENTS=4 (entries per wallet:
#   2 + 2*SEED_PAYMENTS), CONCURRENCIES="16", PHASE_SECS=20, WALLETS=1024, BENCH_MODES=production
#   (or pooled), SKIP_BUILD=1; any other run.sh knob passes through.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
results=$here/results
: "${SMALL_WALLETS:=10000}" "${LARGE_WALLETS:=1000000}" "${SEED_PAYMENTS:=4}"
export SEED_PAYMENTS
export BENCH_MODES=${BENCH_MODES:-production} CONCURRENCIES=${CONCURRENCIES:-16}
export PHASE_SECS=${PHASE_SECS:-20} HOT_CONC=${HOT_CONC:-0}

kept=$(mktemp)
trap 'cp "$kept" "$results/latest.md" 2>/dev/null; rm -f "$kept"' EXIT
cp "$results/latest.md" "$kept" 2>/dev/null || true

for size in small large; do
  if [[ $size == small ]]; then wallets=$SMALL_WALLETS; else wallets=$LARGE_WALLETS; fi
  echo "[data-size] $size: $wallets wallets, $((wallets * (2 + 2 * SEED_PAYMENTS))) ledger entries" >&2
  SEED_WALLETS=$wallets bash "$here/run.sh"
  cp "$results/latest.md" "$results/data-size-$size.md"
  export SKIP_BUILD=1
done

python3 - "$results/data-size-small.md" "$results/data-size-large.md" >"$results/data-size.md" <<'PY'
import re, sys

def tables(path):
    """Every markdown table of the file, by the heading above it: a list of dict rows."""
    out, heading, header = {}, None, None
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("#"):
            heading, header = line.lstrip("# ").strip(), None
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if header is None:
                header = cells
            elif not set("".join(cells)) <= set("-: "):
                out.setdefault(heading, []).append(dict(zip(header, cells)))
        else:
            header = None
    return out

def num(s):
    m = re.search(r"[-0-9.]+", s.replace(",", ""))
    return float(m.group()) if m else None

small, large = (tables(p) for p in sys.argv[1:3])
def phases(t):
    return {(r["mode"], r["conc"]): r for r in t.get("Payment phases", []) if r["phase"] == "payments"}
def entries(t):
    rows = t.get("History and database size", [])
    return next((r["ledger entries after"] for r in rows if r["rows"] == "seeded history"), "?")

print("# Data-size benchmark: a payment's cost with a small and a large history\n")
intro = [l for l in open(sys.argv[2]) if l.startswith(("20", "Load", "Settings"))]
print("Two runs of bench/payments/run.sh, one after the other (data-size.sh). The large one:\n")
for l in intro:
    print("> " + l.rstrip())
print()
print(f"History before the payments: **{entries(small)}** ledger entries (small), **{entries(large)}** (large).\n")
print("| mode | conc | payments/s small | payments/s large | change | p99 ms small | p99 ms large | change | pg ceiling tps small | pg ceiling tps large | ÷ ceiling small | ÷ ceiling large | payments/s within 10% | p99 within 20% |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
ps, pl = phases(small), phases(large)
verdicts = []
for key in sorted(ps, key=lambda k: (k[0], int(k[1]))):
    if key not in pl:
        continue
    a, b = ps[key], pl[key]
    r1, r2, q1, q2 = num(a["payments/s"]), num(b["payments/s"]), num(a["p99 ms"]), num(b["p99 ms"])
    dr = (r2 - r1) / r1 * 100 if r1 else float("nan")
    dq = (q2 - q1) / q1 * 100 if q1 else float("nan")
    ok_r, ok_q = dr >= -10, dq <= 20
    verdicts += [ok_r, ok_q]
    ceil = "pg ceiling tps (same clients)"
    print(f"| {key[0]} | {key[1]} | {r1:.1f} | {r2:.1f} | {dr:+.1f}% | {q1:.2f} | {q2:.2f} | {dq:+.1f}% | "
          f"{a.get(ceil, '-')} | {b.get(ceil, '-')} | {a.get('÷ ceiling', '-')} | {b.get('÷ ceiling', '-')} | "
          f"{'PASS' if ok_r else '**MISS**'} | {'PASS' if ok_q else '**MISS**'} |")
print()
print(f"{sum(verdicts)} of {len(verdicts)} targets met.\n")
print("## Database size\n")
print("| history | mode | rows | ledger entries after | payments | database grew MiB | per million payments |")
print("|---|---|---|---:|---:|---:|---:|")
for name, t in (("small", small), ("large", large)):
    for r in t.get("History and database size", []):
        print(f"| {name} | {r['mode']} | {r['rows']} | {r['ledger entries after']} | {r['payments']} | {r['database grew MiB']} | {r['per million payments']} |")
print()
print("The seeded rows are the records kept for good (payments, postings, entries) and the events "
      "of the last 30 days' window (here a year's, all kept); the run's own rows add what a live "
      "payment also writes (its idempotency record for a day, its QR nonce, jobs, the wallets' setup).")
print("\nEach run's whole summary: data-size-small.md, data-size-large.md.")
PY
cat "$results/data-size.md"
