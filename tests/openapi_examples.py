#!/usr/bin/env python3
"""Pick one recorded exchange per operation for the live document's examples.

    rm -f /tmp/exchanges.jsonl
    WALLET_RECORD_EXAMPLES=/tmp/exchanges.jsonl WALLET_TEST_MODE=embedded \\
        cargo test -p tests --test suite
    python3 tests/openapi_examples.py /tmp/exchanges.jsonl > api/src/http/openapi/examples.json

The suite's `send` records every exchange (secrets already redacted, see
tests/src/examples.rs). Per operation this keeps the one a reader learns most from: a
successful envelope (an error only for an operation that never succeeds, such as the
reserved capture) whose response shows the most members within a size a reader can take in.
Where every response is larger, the smallest is abridged: lists keep their first items and
the document served by `getOpenApi` keeps its head and one path. The suite then checks every
example against the schemas it illustrates.
"""
import json
import sys

LIMIT = 2500  # characters of response a reader can take in at a glance
LIST_ITEMS = 3


def members(value):
    """How many members the value shows, nested ones included."""
    if isinstance(value, dict):
        return len(value) + sum(members(v) for v in value.values())
    if isinstance(value, list):
        return sum(members(v) for v in value[:LIST_ITEMS])
    return 0


def strings(value):
    """Every member name and string in the value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


def control(text):
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def size(record):
    return len(json.dumps(record["response"]))


def score(record):
    fits = size(record) <= LIMIT
    succeeded = record["response"].get("ok") is True
    # A request a partner would send: a body (if any) in the request envelope, a path free
    # of escapes (the suite also probes the edge with control characters and the like).
    request = record["request"]
    plain = not any("%" in str(v) for v in record["parameters"].values()) and (
        request is None
        or (isinstance(request, dict) and not any(map(control, strings(request))))
    )
    # Successes first, then plain requests; among them those that fit, by most members
    # shown (then smaller); otherwise the smallest.
    return (succeeded, plain, record["request"] is not None, fits,
            members(record["response"]) if fits else 0, -size(record))


def abridged(value):
    if isinstance(value, list):
        return [abridged(v) for v in value[:LIST_ITEMS]]
    if isinstance(value, dict):
        return {k: abridged(v) for k, v in value.items()}
    return value


def abridge(op, record):
    if size(record) <= LIMIT:
        return record
    response = record["response"]
    if op == "getOpenApi":
        doc = response["data"]
        first = sorted(doc.get("paths", {}).items())[:1]
        response["data"] = {
            "openapi": doc["openapi"],
            "info": doc["info"],
            "servers": doc.get("servers", []),
            "paths": dict(first),
        }
    else:
        record["response"] = abridged(response)
    return record


def main(path):
    best = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            op = record.pop("operation")
            if op not in best or score(record) > score(best[op]):
                best[op] = record
    picked = {op: abridge(op, r) for op, r in sorted(best.items())}
    json.dump(picked, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
