#!/usr/bin/env bash
# Webhook delivery benchmark: builds the release binaries, then for each mode (embedded,
# production) starts the service, creates a sandbox tenant and an operator credential, and
# runs `payments-bench webhooks`: a receiver on 127.0.0.1 answering 200 at once, S
# subscriptions to payment.completed, N payments at concurrency C, then the wait for all
# N × S deliveries. Reports deliveries/s (first payment's commit → last delivery) and the
# commit-to-delivery latency (p50, p99, max), written to bench/webhooks/results/latest.md.
# The target on this machine: at least 1,000 deliveries/s with p99 under 1 s.
#
# Usage: bench/webhooks/run.sh     (from anywhere)
# Knobs (env, all optional):
#   BENCH_MODES="embedded production"   which modes to run
#   SUBSCRIPTIONS=10 PAYMENTS=1000 CONC=32 WALLETS=64
#   RATE=0                  payments/s offered (0: as fast as the tills can); the offered
#                           delivery rate is RATE × SUBSCRIPTIONS, so RATE=100 measures the
#                           p99 at the 1,000 deliveries/s of the target
#   OUTBOX_POLL_MS          the relay's poll interval (service default 250)
#   BENCH_KEEP_DB=1         keep the production database and the work directory afterwards
#   SKIP_BUILD=1            use the binaries already in target/release
#   CALLGRIND=1             production: run wallet-worker under valgrind's callgrind and
#                           report its instructions per delivery (from the first payment to
#                           the last delivery: relay, fan-out, delivery). Slow: use a few
#                           hundred PAYMENTS
#   BENCH_PGHOST/BENCH_PGPORT/BENCH_PGUSER (127.0.0.1/5432/postgres), BENCH_REDIS_PORT (6379)
set -euo pipefail

HOOK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_TAG=webhooks
# shellcheck source-path=SCRIPTDIR
source "$HOOK_DIR/../lib.sh"
# The receiver listens on loopback.
EXTRA_SERVER_ENV=(WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS=true ${OUTBOX_POLL_MS:+WALLET_OUTBOX_POLL_MS=$OUTBOX_POLL_MS} ${WEBHOOK_CONCURRENCY:+WALLET_WEBHOOK_CONCURRENCY=$WEBHOOK_CONCURRENCY} ${DB_CONNECTIONS:+WALLET_DB_MAX_CONNECTIONS=$DB_CONNECTIONS})
bench_paths "$HOOK_DIR"
BENCH_BIN=$TARGET_DIR/release/payments-bench
SUBSCRIPTIONS=${SUBSCRIPTIONS:-10}
PAYMENTS=${PAYMENTS:-1000}
CONC=${CONC:-32}
WALLETS=${WALLETS:-64}
RATE=${RATE:-0}
bench_knobs
WORKER_WRAP=()
if [[ -n ${CALLGRIND:-} ]]; then
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
    { echo "CALLGRIND=1 needs valgrind (Debian's valgrind package)" >&2; exit 2; }
fi
OPERATOR_BCRYPT_COST=10
TENANT_BCRYPT_COST=12
REDIS_DROP_MAX=500000
PG_SECS=0
scrub_wallet_env
make_workdir /tmp/wallet-webhooks-bench.XXXXXX
need_service_tools
note_tree
build_release -p api -p worker -p payments-bench

ROWS=()
bench_mode() {
  local mode=$1
  local addr data_dir api_log worker_log env_common=() worker_pid db prefix api_pid startup_ms
  local api_metrics worker_metrics
  local callgrind_args=()
  if [[ -n ${CALLGRIND:-} && $mode != embedded ]]; then
    WORKER_WRAP=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$WORK/callgrind-worker-$mode.out")
  fi
  start_services "$mode" "$OPERATOR_BCRYPT_COST" wallet_hookbench wallethookbench
  if ((${#WORKER_WRAP[@]})); then
    callgrind_args=(--worker-pid "$worker_pid" --worker-callgrind-out "$WORK/callgrind-worker-$mode.out")
  fi
  create_tenant "$mode" "hookbench-$mode"
  env "${env_common[@]}" "$API_BIN" operator create --name "hookbench-$mode" --json \
    >"$WORK/operator-$mode.json" 2>"$WORK/operator-$mode.err" ||
    { cat "$WORK/operator-$mode.err" >&2; die "$mode: operator create failed"; }
  local out=$WORK/result-$mode.json
  log "$mode: $PAYMENTS payments × $SUBSCRIPTIONS subscriptions at concurrency $CONC"
  if ! "$BENCH_BIN" webhooks --base "http://$addr" --mode "$mode" \
    --tenant "$WORK/tenant-$mode.json" --operator "$WORK/operator-$mode.json" \
    --subscriptions "$SUBSCRIPTIONS" --payments "$PAYMENTS" --concurrency "$CONC" \
    --wallets "$WALLETS" --rate "$RATE" "${callgrind_args[@]}" --out "$out"; then
    tail -n 30 "$api_log" >&2
    NOTES+=("$mode: the run did not complete (see the log)")
  fi
  [[ -f $out ]] && ROWS+=("$(jq -r '[.mode, (if .offered_payments_per_sec > 0 then (.offered_payments_per_sec * .subscriptions | tostring) else "unpaced" end), .payments, .subscriptions, .delivered, .duplicates, (.payments_per_sec|floor), (.deliveries_per_sec|floor), (.latency_ms_p50|floor), (.latency_ms_p99|floor), (.latency_ms_max|floor), (.worker_instructions_per_delivery // "-" | tostring)] | join(" | ")' "$out")")
  local stop_ms
  stop_services
  WORKER_WRAP=()
  log_problems "$mode: wallet-api" "$api_log"
  [[ -n $worker_pid ]] && log_problems "$mode: wallet-worker" "$worker_log"
  drop_state
}
NOTES=()
run_modes
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Webhook delivery benchmark"
  echo
  summary_intro "payments-bench webhooks"
  echo "Target: at least 1,000 deliveries/s with p99 under 1 s from commit."
  echo
  echo "| mode | offered deliveries/s | payments | subscriptions | delivered | duplicates | payments/s | deliveries/s | p50 ms | p99 ms | max ms | worker instructions/delivery |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for r in "${ROWS[@]}"; do echo "| $r |"; done
  summary_notes
} >"$WORK/summary.md"
publish_summary
