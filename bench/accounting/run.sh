#!/usr/bin/env bash
# Stored-value accounting benchmark (issue 47, docs/accounting.md): on the data-size
# benchmark's history (bench/payments/seed-history.sql: one merchant, SEED_WALLETS wallets
# funded once and paid from SEED_PAYMENTS times over the last year, 10 million ledger
# entries by default), in production mode (PostgreSQL and Redis, API and worker apart):
#
#   1. the liability `as_of` a random instant of the year, for the merchant, without
#      snapshots (the whole history summed: BEFORE_INSTANTS of them),
#   2. building every sealed hour's snapshot (`wallet-api ledger build-snapshots`), timed,
#   3. the same liability with snapshots, p50/p99 over INSTANTS random instants
#      (goal p99 <= 50 ms), and now (as_of left out, the usual call) INSTANTS times,
#   4. a 365-day roll-forward report in UTC and in Europe/Berlin (goal <= 2 s: asked,
#      run by the worker, stored), and a dormant_wallets report over every wallet with a
#      90-day dormancy (goal <= 60 s, API and worker RSS within 20 MB of where they were),
#   5. `wallet-api ledger check` with the snapshots verified, timed.
#
# Writes bench/accounting/results/latest.md and prints it.
#
# Usage: bench/accounting/run.sh
# Knobs (env): SEED_WALLETS=1000000 SEED_PAYMENTS=4 INSTANTS=200 BEFORE_INSTANTS=10
#   SKIP_BUILD=1 (use target/release, or $CARGO_TARGET_DIR/release), BENCH_PGHOST/PORT/USER,
#   BENCH_REDIS_PORT, BENCH_KEEP_DB=1 (keep the database, and the work directory with the tenant's keys, afterwards).
# The summed-history liability (1.) can take longer than the service's 5 s statement
# timeout; this run allows 60 s (WALLET_DB_STATEMENT_TIMEOUT_MS, WALLET_REQUEST_TIMEOUT_MS)
# so it gets a figure rather than a refusal. Everything else runs with the defaults.
set -euo pipefail

ACCT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PAY_DIR=$ACCT_DIR/../payments
LOG_TAG=accounting
# shellcheck source-path=SCRIPTDIR
source "$ACCT_DIR/../lib.sh"
bench_paths "$ACCT_DIR"
bench_knobs
scrub_wallet_env
: "${SEED_WALLETS:=1000000}" "${SEED_PAYMENTS:=4}" "${INSTANTS:=200}" "${BEFORE_INSTANTS:=10}"
TENANT_BCRYPT_COST=10
REDIS_DROP_MAX=100000 # most Redis keys drop_redis_prefix deletes
# The builder runs only when this run says so (step 2), so step 1 has no snapshots.
EXTRA_SERVER_ENV=(WALLET_SNAPSHOT_INTERVAL_SECS=86400 WALLET_RATE_LIMIT=1000000
  WALLET_RATE_LIMIT_SANDBOX=1000000 WALLET_DB_STATEMENT_TIMEOUT_MS=60000 WALLET_REQUEST_TIMEOUT_MS=60000)
BENCH_MODES=production SKIP_PG_CEILING=1
NOTES=()
make_workdir /tmp/wallet-accounting-bench.XXXXXX
need_service_tools
note_tree
build_release -p api -p worker
[[ -x $API_BIN && -x $WORKER_BIN ]] || die "missing $API_BIN or $WORKER_BIN"

mode=production
start_services "$mode" 10 wallet_acctbench walletacctbench
create_tenant "$mode" "acctbench"
tenant=$WORK/tenant-$mode.json
merchant=$(jq -er .merchant_id "$tenant")
integration=$(jq -er .integration_id "$tenant")
key=$(jq -er .platform_key "$tenant")
entries=$((SEED_WALLETS * (2 + 2 * SEED_PAYMENTS)))

log "seeding $SEED_WALLETS wallets x $SEED_PAYMENTS payments ($entries ledger entries)"
t0=$(now_ns)
psql_ -d "$db" -v merchant="$merchant" -v integration="$integration" \
  -v program="$(jq -er .wallet_program_id "$tenant")" \
  -v wallets="$SEED_WALLETS" -v payments="$SEED_PAYMENTS" \
  -f "$PAY_DIR/seed-history.sql" >/dev/null || die "seeding failed"
psql_ -d "$db" -c CHECKPOINT >/dev/null
seed_s=$((($(now_ns) - t0) / 1000000000))
since=$(psql_ -d "$db" -Atc "SELECT to_char(MIN(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US+00:00') FROM ledger_entries")
log "seeded in $seed_s s; history from $since"

measure() { local what=$1; shift; python3 "$ACCT_DIR/measure.py" "$what" "http://$addr" "$integration" "$merchant" "$key" "$@"; }

log "liability without snapshots: $BEFORE_INSTANTS instants"
before=$(measure liability --instants "$BEFORE_INSTANTS" --since "$since")
log "  $before"

log "building the snapshots"
t0=$(now_ns)
built=$(env "${env_common[@]}" "$API_BIN" ledger build-snapshots --merchant "$merchant" 2>"$WORK/build.err") ||
  { cat "$WORK/build.err" >&2; die "build-snapshots failed"; }
build_s=$(awk -v n="$(($(now_ns) - t0))" 'BEGIN {printf "%.1f", n / 1e9}')
log "  $built"
rows=$(psql_ -d "$db" -Atc "SELECT (SELECT COUNT(*) FROM ledger_hour_movements) || ' movement rows, ' || (SELECT COUNT(*) FROM ledger_hour_closings) || ' closing rows'")

log "liability with snapshots: $INSTANTS instants"
after=$(measure liability --instants "$INSTANTS" --since "$since")
log "  $after"
log "liability now (as_of left out): $INSTANTS calls"
current=$(measure liability --instants "$INSTANTS" --now)
log "  $current"

yesterday=$(date -u -d yesterday +%F)
year_ago=$(date -u -d '365 days ago' +%F)
pids="$api_pid,$worker_pid"
log "roll-forward, 365 days, UTC"
rf_utc=$(measure report --pids "$pids" --body "{\"type\":\"liability_rollforward\",\"from\":\"$year_ago\",\"to\":\"$yesterday\",\"merchant_id\":\"$merchant\"}")
log "  $rf_utc"
berlin_yesterday=$(TZ=Europe/Berlin date -d yesterday +%F)
berlin_year_ago=$(TZ=Europe/Berlin date -d '365 days ago' +%F)
log "roll-forward, 365 days, Europe/Berlin"
rf_berlin=$(measure report --pids "$pids" --body "{\"type\":\"liability_rollforward\",\"from\":\"$berlin_year_ago\",\"to\":\"$berlin_yesterday\",\"timezone\":\"Europe/Berlin\",\"merchant_id\":\"$merchant\"}")
log "  $rf_berlin"
measure policy --body '{"dormancy_days": 90, "breakage_rate_bp": 0, "breakage_method": "proportional"}' >/dev/null
log "dormant_wallets over $SEED_WALLETS wallets (dormancy 90 days)"
dormant=$(measure report --pids "$pids" --body "{\"type\":\"dormant_wallets\",\"as_of\":\"$yesterday\",\"merchant_id\":\"$merchant\"}")
log "  $dormant"

log "ledger check with the snapshots verified"
t0=$(now_ns)
if env "${env_common[@]}" "$API_BIN" ledger check --merchant "$merchant" --json >"$WORK/check.json" 2>"$WORK/check.err"; then
  check="consistent"
else
  check="INCONSISTENT or failed: $(head -c 300 "$WORK/check.json" "$WORK/check.err" | tr '\n' ' ')"
fi
check_s=$(awk -v n="$(($(now_ns) - t0))" 'BEGIN {printf "%.1f", n / 1e9}')
log "  $check in $check_s s"
stop_services
log_problems "wallet-api" "$api_log"
log_problems "wallet-worker" "$worker_log"

j() { jq -r "$2" <<<"$1"; }
verdict() { awk -v v="$1" -v g="$2" 'BEGIN { print (v + 0 <= g + 0) ? "PASS" : "MISS" }'; }
rss_ok() { # within 20 MiB of where it was, both processes
  jq -r '[.rss_before_mib, .rss_peak_mib] | transpose | map(.[1] - .[0]) | if all(. <= 20) then "PASS" else "MISS" end' <<<"$1"
}
mkdir -p "$RESULTS"
{
  echo "# Stored-value accounting benchmark"
  echo
  echo "$(date -u +%F) · commit $COMMIT$DIRTY · $(nproc) cores · production mode (PostgreSQL + Redis, API and worker apart) · bench/accounting/run.sh"
  echo
  echo "History: $SEED_WALLETS wallets of one merchant, $entries ledger entries over the last year (bench/payments/seed-history.sql), seeded in $seed_s s."
  echo
  echo "| measure | figure | goal | verdict |"
  echo "|---|---|---|---|"
  echo "| liability as_of, no snapshots ($BEFORE_INSTANTS instants) | p50 $(j "$before" .p50_ms) ms, p99 $(j "$before" .p99_ms) ms, errors $(j "$before" .errors) | - | - |"
  echo "| building every sealed hour's snapshot | $build_s s ($built; $rows) | - | - |"
  echo "| liability as_of, snapshots ($INSTANTS instants) | p50 $(j "$after" .p50_ms) ms, p99 $(j "$after" .p99_ms) ms, max $(j "$after" .max_ms) ms, warm-up $(j "$after" .warmup_ms) ms, errors $(j "$after" .errors) | p99 <= 50 ms | $(verdict "$(j "$after" .p99_ms)" 50) |"
  echo "| liability now (as_of left out, $INSTANTS calls) | p50 $(j "$current" .p50_ms) ms, p99 $(j "$current" .p99_ms) ms, max $(j "$current" .max_ms) ms, errors $(j "$current" .errors) | p99 <= 50 ms | $(verdict "$(j "$current" .p99_ms)" 50) |"
  echo "| roll-forward 365 days, UTC | $(j "$rf_utc" .seconds) s, $(j "$rf_utc" .status), $(j "$rf_utc" .rows) rows, $(j "$rf_utc" .bytes) bytes | <= 2 s | $(verdict "$(j "$rf_utc" .seconds)" 2) |"
  echo "| roll-forward 365 days, Europe/Berlin | $(j "$rf_berlin" .seconds) s, $(j "$rf_berlin" .status), $(j "$rf_berlin" .rows) rows | <= 2 s | $(verdict "$(j "$rf_berlin" .seconds)" 2) |"
  echo "| dormant_wallets, $SEED_WALLETS wallets | $(j "$dormant" .seconds) s, $(j "$dormant" .status), $(j "$dormant" .rows) rows, $(j "$dormant" .bytes) bytes | <= 60 s | $(verdict "$(j "$dormant" .seconds)" 60) |"
  echo "| RSS during dormant_wallets (API, worker) | before $(j "$dormant" '.rss_before_mib | map(tostring + " MiB") | join(", ")'), peak $(j "$dormant" '.rss_peak_mib | map(tostring + " MiB") | join(", ")') | within 20 MiB | $(rss_ok "$dormant") |"
  echo "| wallet-api ledger check (snapshots verified) | $check_s s, $check | - | - |"
  echo
  echo "Each report's time is from the POST to the run's \`succeeded\`, polled every 50 ms: the"
  echo "worker picking the job up, the run, and the file stored. The liability is timed at the"
  echo "client (loopback HTTP, one connection), for instants drawn uniformly over the history,"
  echo "after one untimed call (the key's bcrypt check and the connection; its time is the"
  echo "warm-up figure)."
  [[ ${#NOTES[@]} -gt 0 ]] && printf -- '- %s\n' "${NOTES[@]}"
} >"$WORK/summary.md"
cp "$WORK/summary.md" "$RESULTS/latest.md"
cat "$WORK/summary.md"
