#!/usr/bin/env python3
"""Generates helm/wallet-service/dashboards/wallet-service.json, the Grafana dashboard the
chart ships (dashboard.enabled). Edit the panels here, then run

    python3 helm/tools/dashboard.py          # rewrite the JSON
    python3 helm/tools/dashboard.py --check  # exit 1 if the JSON is not what this generates

helm/test.sh runs --check, so the JSON and this file cannot drift apart. Every query is
scoped to the dashboard's $namespace and $pod variables; metric names come from
helm/metrics-catalogue.txt (helm/test.sh checks that too).
"""
import json
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "wallet-service", "dashboards", "wallet-service.json")

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace="$namespace", pod=~"$pod"'


def sel(extra=""):
    return "{" + SEL + (", " + extra if extra else "") + "}"


panels = []
_next_id = [1]
_y = [0]
_x = [0]
_row_h = [0]


def _id():
    i = _next_id[0]
    _next_id[0] += 1
    return i


def row(title):
    """Starts a new row of panels."""
    if _x[0]:
        _y[0] += _row_h[0]
    _x[0], _row_h[0] = 0, 0
    panels.append({"type": "row", "id": _id(), "title": title, "collapsed": False,
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": _y[0]}, "panels": []})
    _y[0] += 1


def _place(w, h):
    if _x[0] + w > 24:
        _y[0] += _row_h[0]
        _x[0], _row_h[0] = 0, 0
    pos = {"h": h, "w": w, "x": _x[0], "y": _y[0]}
    _x[0] += w
    _row_h[0] = max(_row_h[0], h)
    return pos


def _targets(queries):
    out = []
    for i, (expr, legend) in enumerate(queries):
        out.append({"refId": chr(ord("A") + i), "datasource": DS, "expr": expr,
                    "legendFormat": legend, "range": True, "editorMode": "code"})
    return out


def timeseries(title, description, queries, unit="short", w=12, h=8, stack=False, min0=True):
    defaults = {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                         "showPoints": "never", "spanNulls": False,
                                         "stacking": {"mode": "normal" if stack else "none", "group": "A"}}}
    if min0:
        defaults["min"] = 0
    panels.append({
        "type": "timeseries", "id": _id(), "title": title, "description": description,
        "datasource": DS, "gridPos": _place(w, h),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "showLegend": True,
                               "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": _targets(queries),
    })


def stat(title, description, queries, unit="short", w=4, h=4, thresholds=None, mappings=None, instant=True):
    steps = thresholds or [{"color": "green", "value": None}]
    targets = _targets(queries)
    for t in targets:
        t["instant"] = instant
        t["range"] = not instant
    panels.append({
        "type": "stat", "id": _id(), "title": title, "description": description,
        "datasource": DS, "gridPos": _place(w, h),
        "fieldConfig": {"defaults": {"unit": unit, "mappings": mappings or [],
                                     "thresholds": {"mode": "absolute", "steps": steps}},
                        "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "background", "graphMode": "none", "justifyMode": "auto",
                    "orientation": "auto", "textMode": "auto"},
        "targets": targets,
    })


def red_above(v):
    return [{"color": "green", "value": None}, {"color": "red", "value": v}]


RI = "$__rate_interval"
S5XX = 'status_class="5xx"'
V1 = 'route=~"/v1/.*"'

# ---- overview -----------------------------------------------------------------------------
row("Overview")
stat("Subsystems down", "Dependencies (database, redis, job_queue) reported down by at least one pod. "
     "Non-zero: see the Process row and docs/operations/alerts.md#walletsubsystemdown.",
     [(f"count(min by (subsystem) (wallet_subsystem_up{sel()}) == 0) or vector(0)", "")],
     thresholds=red_above(1))
stat("5xx ratio (5m)", "Share of API requests answered 5xx over the last 5 minutes.",
     [(f'sum(rate(wallet_http_request_duration_seconds_count{sel(S5XX)}[5m])) / '
       f"sum(rate(wallet_http_request_duration_seconds_count{sel()}[5m]))", "")],
     unit="percentunit", thresholds=red_above(0.01))
stat("Requests shed (5m)", "Requests refused by admission control (fast 503) in the last 5 minutes.",
     [(f"sum(increase(wallet_http_requests_shed_total{sel()}[5m]))", "")], thresholds=red_above(1))
stat("Outbox oldest event", "Age of the oldest committed event not yet relayed to the job queues.",
     [(f"max(wallet_outbox_oldest_pending_age_seconds{sel()})", "")], unit="s", thresholds=red_above(60))
stat("Dead letters", "Dead letters still waiting (not replayed or purged), all queues. "
     "Drain: docs/operations/dead-letters.md.",
     [(f"sum(max by (queue) (wallet_dead_letters{sel()}))", "")], thresholds=red_above(1))
stat("Versions running", "Pods per version (wallet_build_info).",
     [(f"count by (version) (wallet_build_info{sel()})", "{{version}}")])

# ---- HTTP ---------------------------------------------------------------------------------
row("HTTP (API)")
timeseries("Request rate by route", "Requests per second per matched route template (unmatched: no route).",
           [(f"sum by (route) (rate(wallet_http_request_duration_seconds_count{sel()}[{RI}]))", "{{route}}")],
           unit="reqps")
timeseries("5xx ratio by route", "Share of each route's requests answered 5xx.",
           [(f'sum by (route) (rate(wallet_http_request_duration_seconds_count{sel(S5XX)}[{RI}])) / '
             f"sum by (route) (rate(wallet_http_request_duration_seconds_count{sel()}[{RI}]))", "{{route}}")],
           unit="percentunit")
timeseries("Latency p50 / p95 / p99 by route", "Request latency quantiles per /v1 route (from the histogram buckets).",
           [(f"histogram_quantile({q}, sum by (le, route) (rate(wallet_http_request_duration_seconds_bucket"
             f"{sel(V1)}[{RI}])))", f"p{int(q * 100)} {{{{route}}}}")
            for q in (0.5, 0.95, 0.99)],
           unit="s", w=24, h=10)
timeseries("Responses by status class", "Requests per second by status class (2xx, 3xx, 4xx, 5xx).",
           [(f"sum by (status_class) (rate(wallet_http_request_duration_seconds_count{sel()}[{RI}]))", "{{status_class}}")],
           unit="reqps", stack=True)
timeseries("In flight, shed and past deadline", "Requests running now (per pod), requests refused by admission "
           "control (503) and requests that ran past WALLET_REQUEST_TIMEOUT_MS, per second.",
           [(f"sum by (pod) (wallet_http_requests_in_flight{sel()})", "in flight {{pod}}"),
            (f"sum(rate(wallet_http_requests_shed_total{sel()}[{RI}]))", "shed /s"),
            (f"sum(rate(wallet_http_request_deadline_exceeded_total{sel()}[{RI}]))", "deadline exceeded /s")])

# ---- database and Redis -------------------------------------------------------------------
row("Database pool and Redis")
timeseries("DB pool connections by pod", "Connections in use and idle, and the pool size, per pod. "
           "In use near max: requests wait for a connection (see acquire p99).",
           [(f"sum by (pod, state) (wallet_db_pool_connections{sel()})", "{{state}} {{pod}}"),
            (f"max by (pod) (wallet_db_pool_max_connections{sel()})", "max {{pod}}")])
timeseries("DB pool acquire p99 by pod", "p99 time waiting for a database connection.",
           [(f"histogram_quantile(0.99, sum by (le, pod) (rate(wallet_db_pool_acquire_duration_seconds_bucket{sel()}[{RI}])))",
             "{{pod}}")], unit="s")
timeseries("Redis command p99 by command", "p99 duration of Redis commands.",
           [(f"histogram_quantile(0.99, sum by (le, command) (rate(wallet_redis_command_duration_seconds_bucket{sel()}[{RI}])))",
             "{{command}}")], unit="s")
timeseries("Redis errors by command and kind", "Redis calls that timed out (WALLET_REDIS_TIMEOUT_MS) or failed, per second.",
           [(f"sum by (command, kind) (rate(wallet_redis_errors_total{sel()}[{RI}]))", "{{command}} {{kind}}")])

# ---- read replica -------------------------------------------------------------------------
row("Read replica (WALLET_DATABASE_REPLICA_URL)")
timeseries("Replica lag", "How far the read replica is behind the primary, as each pod's probe measures it "
           "once a second: seconds since the last transaction it replayed committed (0 once caught up).",
           [(f"max by (pod) (wallet_db_replica_lag_seconds{sel()})", "seconds {{pod}}")], unit="s", w=8)
timeseries("Replica lag in WAL bytes", "WAL the replica has still to replay.",
           [(f"max by (pod) (wallet_db_replica_lag_bytes{sel()})", "{{pod}}")], unit="bytes", w=8)
timeseries("Replica usable", "1 while lag-tolerant reads may go to the replica; 0 while it is down, promoted or "
           "behind WALLET_REPLICA_MAX_LAG_MS (reads then go to the primary).",
           [(f"min by (pod) (wallet_db_replica_usable{sel()})", "{{pod}}")], w=8)
timeseries("Lag-tolerant reads by where served", "Feed and console requests per second, served by the replica "
           "or the primary; and statements that failed on the replica and ran again on the primary.",
           [(f"sum by (served_from) (rate(wallet_db_lagging_reads_total{sel()}[{RI}]))", "{{served_from}}"),
            (f"sum (rate(wallet_db_replica_fallbacks_total{sel()}[{RI}]))", "fallbacks")], unit="reqps", w=24)

# ---- outbox -------------------------------------------------------------------------------
row("Outbox")
timeseries("Outbox pending events", "Committed events not yet relayed to the job queues (sampled from the database: "
           "every pod reports the same value, so max).",
           [(f"max(wallet_outbox_pending_events{sel()})", "pending")], w=8)
timeseries("Outbox oldest pending age", "Age of the oldest unrelayed event; growing steadily: the relay is stuck.",
           [(f"max(wallet_outbox_oldest_pending_age_seconds{sel()})", "oldest")], unit="s", w=8)
timeseries("Outbox relay rate", "Events relayed per second, per pod.",
           [(f"sum by (pod) (rate(wallet_outbox_relayed_total{sel()}[{RI}]))", "{{pod}}")], w=8)

# ---- webhooks -----------------------------------------------------------------------------
row("Webhooks")
timeseries("Delivery attempts by outcome and endpoint health", "Webhook attempts per second: success, http_error, "
           "timeout, connect_error, refused; endpoint_health=failing marks endpoints in a failure streak.",
           [(f"sum by (outcome, endpoint_health) (rate(wallet_webhook_delivery_attempts_total{sel()}[{RI}]))",
             "{{outcome}} ({{endpoint_health}})")], stack=True)
timeseries("Delivery p95 by outcome", "p95 time of one delivery attempt.",
           [(f"histogram_quantile(0.95, sum by (le, outcome) (rate(wallet_webhook_delivery_duration_seconds_bucket{sel()}[{RI}])))",
             "{{outcome}}")], unit="s")
timeseries("Endpoints auto-disabled", "Endpoints disabled after sustained failure, per hour. Re-enable in the "
           "console (/ops, Webhook endpoints) once the partner answers again.",
           [(f"sum(increase(wallet_webhook_endpoints_disabled_total{sel()}[1h]))", "disabled / 1h")], w=24, h=6)

# ---- jobs ---------------------------------------------------------------------------------
row("Jobs")
timeseries("Job run time p95 by job type", "p95 duration of one job run (sms_send, webhook_deliver, webhook_batch, report_run).",
           [(f"histogram_quantile(0.95, sum by (le, job_type) (rate(wallet_job_run_duration_seconds_bucket{sel()}[{RI}])))",
             "{{job_type}}")], unit="s")
timeseries("Job runs by outcome", "Runs per second by job type and outcome (success, retry, dead).",
           [(f"sum by (job_type, outcome) (rate(wallet_job_run_duration_seconds_count{sel()}[{RI}]))",
             "{{job_type}} {{outcome}}")])
timeseries("Queue wait p95 by job type", "p95 time from first enqueue to completion.",
           [(f"histogram_quantile(0.95, sum by (le, job_type) (rate(wallet_job_queue_wait_seconds_bucket{sel()}[{RI}])))",
             "{{job_type}}")], unit="s")
timeseries("Retries and dead letters", "Retries and new dead letters per second, by job type.",
           [(f"sum by (job_type) (rate(wallet_job_retries_total{sel()}[{RI}]))", "retries {{job_type}}"),
            (f"sum by (job_type) (rate(wallet_job_dead_letters_total{sel()}[{RI}]))", "dead-lettered {{job_type}}")])
timeseries("Queue depth", "Jobs pending and running per job type (sampled from the database: max across pods).",
           [(f"max by (job_type, status) (wallet_job_queue_depth{sel()})", "{{job_type}} {{status}}")])
timeseries("Dead letters per queue", "Dead letters still dead (not replayed or purged). Drain with "
           "`wallet-worker dlq stats` / `dlq list` or the console: docs/operations/dead-letters.md.",
           [(f"max by (queue) (wallet_dead_letters{sel()})", "{{queue}}")])

# ---- retention and process ----------------------------------------------------------------
row("Retention and process")
timeseries("Retention: rows deleted per hour", "Rows removed by the retention sweeps, per table.",
           [(f"sum by (table) (increase(wallet_retention_deleted_rows_total{sel()}[1h]))", "{{table}}")], w=8)
timeseries("Retention: time since last success", "Per table; growing without bound: the sweep fails.",
           [(f"time() - max by (table) (wallet_retention_last_success_timestamp_seconds{sel()})", "{{table}}")],
           unit="s", w=8)
timeseries("Subsystem up by pod", "1 up, 0 down, per pod and subsystem (database, redis, job_queue).",
           [(f"min by (pod, subsystem) (wallet_subsystem_up{sel()})", "{{subsystem}} {{pod}}")], w=8)
timeseries("Partitions: months ahead", "Months past the current one every partitioned history table "
           "can take writes for (PostgreSQL; upkeep keeps 3). Below 2: WalletPartitionsRunningOut.",
           [(f"min(wallet_db_partition_months_ahead{sel()})", "months ahead")], w=8)


def var_query(name, label, query, multi):
    v = {"name": name, "label": label, "type": "query", "datasource": DS,
         "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
         "definition": query, "refresh": 2, "sort": 1, "hide": 0, "regex": "",
         "includeAll": multi, "multi": multi, "current": {}, "options": []}
    if multi:
        v["allValue"] = ".*"
    return v


dashboard = {
    "uid": "wallet-service",
    "title": "Wallet service",
    "description": "On-call view of wallet-service (API and workers). Alerts and runbooks: docs/operations/alerts.md.",
    "tags": ["wallet-service", "payments"],
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "graphTooltip": 1,
    "fiscalYearStartMonth": 0,
    "liveNow": False,
    "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "timepicker": {},
    "timezone": "",
    "weekStart": "",
    "links": [],
    "annotations": {"list": [{
        "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
        "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]},
    "templating": {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1, "regex": ""},
        var_query("namespace", "Namespace", "label_values(wallet_build_info, namespace)", False),
        var_query("pod", "Pod", 'label_values(wallet_build_info{namespace="$namespace"}, pod)', True),
    ]},
    "panels": panels,
}

text = json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"
if sys.argv[1:] == ["--check"]:
    current = open(OUT).read() if os.path.exists(OUT) else ""
    if current != text:
        print(f"{OUT} is not what helm/tools/dashboard.py generates: run python3 helm/tools/dashboard.py", file=sys.stderr)
        sys.exit(1)
else:
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {os.path.normpath(OUT)} ({len(panels)} panels)")
