#!/usr/bin/env python3
"""Where an API payment's instructions go: one callgrind dump of a payment window (bench/payments
run with CALLGRIND=1 and BENCH_KEEP_DB=1 keeps them, one per phase), read with valgrind's own
callgrind_annotate, scaled to one payment.

    python3 bench/payments/profile.py DUMP PAYMENTS [--top 25]

PAYMENTS is how many payments the window took (the report's count for that phase). Prints
Markdown: the window's instructions per payment, the top functions by inclusive cost, and every
instruction (self cost, so the groups add up to the total) grouped by what it does.
"""
import argparse
import re
import subprocess
import sys

# What a function's instructions are for, by the first pattern its name matches (self cost).
# Order matters: the most specific first.
GROUPS = [
    ("SQL building (sea-query and sea-orm statements, their clones and drops)", r"sea_query|sea_orm"),
    ("database driver (sqlx: encode, decode, protocol)", r"sqlx|postgres_protocol|chrono"),
    ("allocation (mimalloc)", r"\bmi_|_mi_|\bmalloc|\bfree\b|__rust_alloc|__rust_dealloc|__rust_realloc|raw_vec|finish_grow"),
    ("memory copy, move and compare (libc)", r"__memcpy|__memmove|__memset|__memcmp|__strlen|__strchr|\bmemcpy|\bmemmove|\bmemset|\bmemcmp|\bbcmp"),
    ("JWT", r"jsonwebtoken|::jwt::"),
    ("hashing, HMAC, base64, random, UUIDs", r"sha2|hmac|digest::|base64|getrandom|rand::|rand_core|uuid::"),
    ("TLS and sealing (AES-GCM)", r"aes|gcm|ghash|rustls|\bring::|chacha|poly1305"),
    ("JSON reading and writing", r"serde_json|serde::|serde_core|itoa|ryu"),
    ("OpenAPI layer", r"poem_openapi"),
    ("routing and middleware (poem, hyper, HTTP)", r"\bpoem::|hyper|\bhttp::|h2::|httparse|headers::|tower"),
    ("Redis", r"redis::|deadpool|combine::"),
    ("tracing and metrics", r"tracing|metrics|opentelemetry|prometheus|valuable"),
    ("async runtime and sockets", r"tokio::|mio::|futures|parking_lot|std::sync|std::thread|__libc_|epoll|syscall|__GI_|pthread|clock_gettime|__lll_|core::task"),
    ("the service's own code (validation, domain, store)", r"\bapi::|entities::|migration::"),
    ("formatting and strings", r"fmt|String|core::str|<str>|utf8|Utf8|to_string"),
    ("clones and drops of other values", r"Clone>::clone|drop_in_place|to_vec"),
    ("hash maps and collections", r"hashbrown|std::collections|alloc::collections|BTreeMap|btree|smallvec|indexmap|bytes::"),
]
# Frames that wrap everything under them (the runtime, the server, futures, endpoint layers):
# their inclusive cost says nothing about where the work is. Recursion shows as name'N.
PLUMBING = re.compile(
    r"'\d+$|tokio::runtime|core::future|poem::endpoint|poem::server|poem::route|hyper|tracing::instrument|"
    r"AssertUnwindSafe|PollFn|Box<T> as poem|Timeout|TaskLocalFuture|panic|MapToResponse|task_local|Instrumented|Pin<"
)
LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*?)\s*$")


def annotate(dump, inclusive):
    args = ["callgrind_annotate", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", dump]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    total, rows = None, []
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        ir, name = int(m.group(1).replace(",", "")), m.group(2)
        if name.startswith("PROGRAM TOTALS"):
            total = ir
        else:
            rows.append((ir, clean(name)))
    return total, rows


def clean(name):
    name = re.sub(r"\s*\[[^\]]*\]$", "", name)  # the object file
    name = re.sub(r"^[^:]*\?\?\?:", "", name)      # no file
    name = re.sub(r"^.*?\.rs:", "", name)          # a source file
    name = re.sub(r"::h[0-9a-f]{16}$", "", name)   # the symbol hash
    return name


def group_of(name):
    for group, pattern in GROUPS:
        if re.search(pattern, name):
            return group
    return "other (libc, the standard library)"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dump")
    p.add_argument("payments", type=int)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    total, selfs = annotate(a.dump, inclusive=False)
    _, incl = annotate(a.dump, inclusive=True)
    if not total:
        sys.exit("no PROGRAM TOTALS in the annotation")
    per = lambda ir: ir / a.payments  # noqa: E731
    print(f"{per(total):,.0f} instructions per payment ({total:,} in the window, {a.payments:,} payments)\n")
    print(f"Top {a.top} functions by inclusive cost (a function and all it calls), per payment, "
          "leaving out the frames that wrap everything (runtime, server, endpoint layers, futures):\n")
    print("| # | inclusive | share | function |")
    print("|---:|---:|---:|---|")
    meaningful = [(ir, n) for ir, n in incl if not PLUMBING.search(n)]
    for i, (ir, name) in enumerate(sorted(meaningful, reverse=True)[: a.top], 1):
        print(f"| {i} | {per(ir):,.0f} | {100 * ir / total:.1f}% | `{name[:140]}` |")
    groups = {}
    for ir, name in selfs:
        g = group_of(name)
        groups[g] = groups.get(g, 0) + ir
    groups["below the annotation's threshold"] = total - sum(ir for ir, _ in selfs)
    print(f"\nTop {a.top} functions by self cost, per payment:\n")
    print("| # | self | share | function | group |")
    print("|---:|---:|---:|---|---|")
    for i, (ir, name) in enumerate(sorted(selfs, reverse=True)[: a.top], 1):
        print(f"| {i} | {per(ir):,.0f} | {100 * ir / total:.1f}% | `{name[:120]}` | {group_of(name)} |")
    print("\nEvery instruction by what it does (self cost, so the rows add up), per payment:\n")
    print("| group | instructions | share |")
    print("|---|---:|---:|")
    for g, ir in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {g} | {per(ir):,.0f} | {100 * ir / total:.1f}% |")


if __name__ == "__main__":
    main()
