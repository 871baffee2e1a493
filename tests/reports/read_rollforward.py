#!/usr/bin/env python3
"""Read a liability roll-forward CSV as a finance team would, twice: with Python's csv
module and with DuckDB, and print what each found as one JSON object.

    python3 tests/reports/read_rollforward.py report.csv

For every row it checks opening + movements = closing, and that a day's closing is the next
day's opening (per merchant, currency and class). It prints, per reader, the row count and
per date the liability (the closing of every class but pending_topup), so the suite can
compare both with the service's own liability endpoint.
"""
import csv
import json
import sys
from collections import defaultdict

import duckdb

NOT_LIABILITY = "pending_topup"


def with_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    movement_cols = [
        c
        for c in rows[0].keys()
        if c.endswith("_minor") and c not in ("opening_minor", "closing_minor", "breakage_estimate_minor")
    ]
    last = {}
    liability = defaultdict(int)
    for r in rows:
        opening, closing = int(r["opening_minor"]), int(r["closing_minor"])
        moved = sum(int(r[c]) for c in movement_cols)
        if opening + moved != closing:
            raise SystemExit(f"row does not close: {r}")
        key = (r["merchant_id"], r["currency"], r["class"])
        if key in last and last[key][1] != opening:
            raise SystemExit(f"{key} opens {r['date']} at {opening}, closed the day before at {last[key][1]}")
        last[key] = (r["date"], closing)
        if r["class"] != NOT_LIABILITY:
            liability[r["date"]] += closing
    return {"rows": len(rows), "movement_columns": movement_cols, "liability": dict(liability)}


def with_duckdb(path):
    con = duckdb.connect()
    rel = con.read_csv(path, header=True)
    con.register("report", rel)
    rows = con.execute("SELECT count(*) FROM report").fetchone()[0]
    by_date = con.execute(
        "SELECT CAST(date AS VARCHAR), CAST(sum(closing_minor) AS BIGINT) FROM report "
        "WHERE class <> ? GROUP BY date ORDER BY date",
        [NOT_LIABILITY],
    ).fetchall()
    broken = con.execute(
        "SELECT count(*) FROM report WHERE opening_minor + loads_sku_minor + loads_settlement_minor "
        "+ bonuses_minor + redemptions_minor + refunds_minor + voids_minor + reversals_minor "
        "+ expiries_minor + clawbacks_minor + adjustments_minor + escrow_in_minor + escrow_out_minor "
        "+ transfers_minor + pending_requests_minor + other_minor <> closing_minor"
    ).fetchone()[0]
    return {"rows": rows, "broken_rows": broken, "liability": {d: int(v) for d, v in by_date}}


def main():
    path = sys.argv[1]
    print(json.dumps({"csv": with_csv(path), "duckdb": with_duckdb(path)}))


if __name__ == "__main__":
    main()
