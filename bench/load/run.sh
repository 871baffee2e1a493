#!/usr/bin/env bash
# Overload and soak: builds the release binaries, starts the service (production mode by
# default: wallet-worker and wallet-api as separate processes on PostgreSQL and Redis),
# creates a sandbox tenant and an operator credential, and runs `payments-bench load`:
# wallets registered and funded (untimed), the capacity measured as closed-loop sales (QR
# mint + payment) per second, then open-loop phases at multiples of that capacity. Each
# phase reports, every INTERVAL_SECS, payments/s and p50/p99, what was shed (503
# capacity / 429, and how fast), other failures, the RSS of the API and the worker and the
# outbox backlog (the relaying process's /metrics). Then the ledger check. See README.md.
#
# Usage: bench/load/run.sh            overload: 0.5x for 30 s, then 2x for 30 s (~5 min)
#        PHASES=0.5:1800 INTERVAL_SECS=60 bench/load/run.sh     the 30-minute soak
# Knobs (env, all optional):
#   BENCH_MODES=production   or embedded, or both
#   PHASES="0.5:30,2:30"     open-loop phases, MULT:SECS
#   WALLETS=2048 CAP_CONC=64 CAP_SECS=20 INTERVAL_SECS=10 SETUP_CONC=4
#   BENCH_PG_PRIVATE=1       production mode on a PostgreSQL cluster of the run's own (initdb,
#                            server defaults: autovacuum on); 0: the one at BENCH_PGHOST/PORT
#   SKIP_BUILD=1  BENCH_PGHOST/BENCH_PGPORT/BENCH_PGUSER, BENCH_REDIS_PORT, BENCH_PG_TLS=off
#   RESULT_NAME=latest       results/RESULT_NAME.md and .json
#   SERVER_ENV="NAME=value ..."  extra settings for the service (e.g. admission control off:
#                            WALLET_MAX_INFLIGHT_REQUESTS=100000 WALLET_MAX_QUEUED_REQUESTS=100000)
set -euo pipefail

LOAD_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_TAG=load
# shellcheck source-path=SCRIPTDIR
source "$LOAD_DIR/../lib.sh"
bench_paths "$LOAD_DIR"
BENCH_BIN=$TARGET_DIR/release/payments-bench
PHASES=${PHASES:-0.5:30,2:30}
WALLETS=${WALLETS:-2048}
CAP_CONC=${CAP_CONC:-64}
CAP_SECS=${CAP_SECS:-20}
INTERVAL_SECS=${INTERVAL_SECS:-10}
SETUP_CONC=${SETUP_CONC:-4}
RESULT_NAME=${RESULT_NAME:-latest}
BENCH_MODES=${BENCH_MODES:-production}
bench_knobs
BENCH_MODES=${BENCH_MODES:-production}
OPERATOR_BCRYPT_COST=10
TENANT_BCRYPT_COST=12
REDIS_DROP_MAX=5000000
PG_SECS=0
[[ $PHASES =~ ^[0-9.]+:[0-9.]+(,[0-9.]+:[0-9.]+)*$ ]] || { echo "bad PHASES: $PHASES" >&2; exit 2; }

scrub_wallet_env
make_workdir /tmp/wallet-load-bench.XXXXXX
need_service_tools
# Unless BENCH_PG_PRIVATE=0: a PostgreSQL of the run's own with the server's defaults.
# A soak measures what the service does over time, and this machine's shared server runs
# with autovacuum off (a CI setting): its tables would bloat for a reason no production
# database has (measured: payment p99 from 21 ms to 148 ms within nine minutes).
if [[ ${BENCH_PG_PRIVATE:-1} != 0 && $BENCH_MODES == *production* ]]; then start_private_pg; fi
note_tree
build_release -p api -p worker -p payments-bench
[[ -x $API_BIN && -x $WORKER_BIN && -x $BENCH_BIN ]] || die "missing $API_BIN, $WORKER_BIN or $BENCH_BIN"

EXTRA_SERVER_ENV=()
read -r -a extra <<<"${SERVER_ENV:-}"
EXTRA_SERVER_ENV+=("${extra[@]}")
RESULT_FILES=()
NOTES=()

bench_mode() {
  local mode=$1
  local addr data_dir api_log worker_log env_common=() worker_pid db prefix api_pid startup_ms
  local api_metrics worker_metrics
  start_services "$mode" "$OPERATOR_BCRYPT_COST" wallet_loadbench walletloadbench
  create_tenant "$mode" "loadbench-$mode"
  env "${env_common[@]}" "$API_BIN" operator create --name "loadbench-$mode" --json \
    >"$WORK/operator-$mode.json" 2>"$WORK/operator-$mode.err" ||
    { cat "$WORK/operator-$mode.err" >&2; die "$mode: operator create failed"; }
  local merchant metrics_url worker_args=()
  merchant=$(jq -er .merchant_id "$WORK/tenant-$mode.json")
  # Where the outbox relay runs: the worker in production, the API itself in embedded mode.
  if [[ -n $worker_pid ]]; then
    worker_args=(--worker-pid "$worker_pid")
    metrics_url="http://$worker_metrics/metrics"
  else
    metrics_url="http://$api_metrics/metrics"
  fi
  local out=$WORK/load-$mode.json
  if ! "$BENCH_BIN" load --base "http://$addr" --mode "$mode" \
    --tenant "$WORK/tenant-$mode.json" --operator "$WORK/operator-$mode.json" \
    --wallets "$WALLETS" --setup-concurrency "$SETUP_CONC" \
    --capacity-concurrency "$CAP_CONC" --capacity-secs "$CAP_SECS" \
    --phases "$PHASES" --interval-secs "$INTERVAL_SECS" \
    --api-pid "$api_pid" "${worker_args[@]}" --metrics-url "$metrics_url" --out "$out"; then
    tail -n 30 "$api_log" >&2
    die "$mode: payments-bench load failed"
  fi
  RESULT_FILES+=("$out")
  local stop_ms
  stop_services
  if ! env "${env_common[@]}" "$API_BIN" ledger check --merchant "$merchant" >"$WORK/ledger-$mode.json" 2>&1; then
    NOTES+=("$mode: wallet-api ledger check FAILED: $(head -c 300 "$WORK/ledger-$mode.json")")
  else
    NOTES+=("$mode: ledger check after the run: consistent")
  fi
  log_problems "$mode: wallet-api" "$api_log"
  [[ -n $worker_pid ]] && log_problems "$mode: wallet-worker" "$worker_log"
  drop_state
}

run_modes

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Overload and soak results"
  echo
  summary_intro "payments-bench load"
  echo "Settings: PHASES=$PHASES, WALLETS=$WALLETS, SERVER_ENV='${SERVER_ENV:-}', BENCH_PG_PRIVATE=${BENCH_PG_PRIVATE:-1} (production on a PostgreSQL cluster of the run's own, server defaults: autovacuum on), capacity by $CAP_CONC closed-loop clients for ${CAP_SECS}s, intervals of ${INTERVAL_SECS}s; a sale is a QR mint then a 1-cent payment."
  for f in "${RESULT_FILES[@]}"; do
    echo
    jq -r '
      def ms: . * 10 | round / 10;
      def kib: if . == null then "-" else (. / 1024 | . * 10 | round / 10 | tostring) end;
      "## \(.mode)\n\nCapacity: **\(.capacity_sales_per_sec | . * 10 | round / 10) sales/s** (closed loop, \(.capacity_concurrency) clients; payment p50 \(.capacity_pay_p50_ms | ms) ms, p99 \(.capacity_pay_p99_ms | ms) ms).\n",
      "| phase | due sales/s | payments/s | payment p50 ms | payment p99 ms | mint p99 ms | shed | shed p99 ms | shed without Retry-After | other failures | not started | API RSS MiB (end) | worker RSS MiB (end) | outbox pending (end) |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
      (.phases[] | "| \(.multiple)× for \(.secs)s | \(.rate | . * 10 | round / 10) | \(.summary.payments_per_sec | . * 10 | round / 10) | \(.summary.pay_p50_ms | ms) | \(.summary.pay_p99_ms | ms) | \(.summary.mint_p99_ms | ms) | \(.summary.shed) | \(.summary.shed_p99_ms | ms) | \(.summary.shed_without_retry_after) | \(.summary.failures | to_entries | map("\(.key): \(.value)") | join(", ") | if . == "" then "0" else . end) | \(.summary.not_started) | \(.summary.api_rss_kib | kib) | \(.summary.worker_rss_kib | kib) | \(.summary.outbox_pending // "-") |"),
      "",
      (.phases[] | "### \(.multiple)× by interval\n\n| t s | payments/s | p50 ms | p99 ms | shed | API RSS MiB | worker RSS MiB | outbox pending | oldest unrelayed s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + ([.intervals[] | "| \(.t_secs | round) | \(.payments_per_sec | . * 10 | round / 10) | \(.pay_p50_ms | ms) | \(.pay_p99_ms | ms) | \(.shed) | \(.api_rss_kib | kib) | \(.worker_rss_kib | kib) | \(.outbox_pending // "-") | \(.outbox_oldest_pending_secs // "-") |"] | join("\n")) + "\n")
    ' "$f"
  done
  summary_notes
} >"$WORK/summary.md"
mkdir -p "$LOAD_DIR/results"
cp "$WORK/summary.md" "$LOAD_DIR/results/$RESULT_NAME.md"
for f in "${RESULT_FILES[@]}"; do cp "$f" "$LOAD_DIR/results/$RESULT_NAME-$(basename "$f")"; done
cat "$WORK/summary.md"
log "written to bench/load/results/$RESULT_NAME.md"
