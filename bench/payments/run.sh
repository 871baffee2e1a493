#!/usr/bin/env bash
# Payments benchmark: builds the release binaries, then for each mode (embedded, production)
# starts the service, creates a sandbox tenant and an operator credential, and runs
# payments-bench against it: W wallets registered and funded (untimed), POST /v1/payments
# at concurrency 16 and 64 (one freshly minted QR and one Idempotency-Key per payment), then
# one hot wallet at concurrency 32 (OTP credentials). Then pg-ceiling.sh at the same
# concurrencies, and one summary with payments/s, p50/p99, the ratio to the ceiling, the
# API's peak RSS and PASS/MISS against the targets, also written to
# bench/payments/results/latest.md. See bench/payments/README.md.
#
# Usage: bench/payments/run.sh     (from anywhere)
# Knobs (env, all optional):
#   BENCH_MODES="embedded production"   which modes to run; "pooled" is production through
#                           PgBouncer in transaction mode (POOLER_POOL_SIZE=20 server sessions)
#   WALLETS=1024            wallets of the many-wallet phases (one QR each per round)
#   PHASE_SECS=10           timed seconds per concurrency phase (1..60)
#   CONCURRENCIES="16 64"   the many-wallet phases (pg-ceiling.sh runs at each of them)
#   HOT_CONC=32 HOT_OTPS=3000 HOT_SECS=10   hot-wallet phase (HOT_CONC=0 skips it)
#   SETUP_CONC=4 MINT_CONC=32               untimed setup concurrency
#   PG_SECS=15              seconds of each pg-ceiling.sh run (1..60)
#   DB_CONNECTIONS=20       the API's database pool (WALLET_DB_MAX_CONNECTIONS; default: the service's)
#   SKIP_BUILD=1            use the binaries already in target/release
#   SKIP_PG_CEILING=1       do not run the PostgreSQL ceiling
#   SEED_WALLETS=N SEED_PAYMENTS=4   history already there when the payments start (PostgreSQL
#                           modes): N wallets of the tenant's merchant, each funded once and
#                           paid from SEED_PAYMENTS times over the last year, N*(2+2*SEED_PAYMENTS)
#                           ledger entries (seed-history.sql); pg-ceiling.sh gets the same
#                           wallets and entries. The summary gives the database's size per
#                           million payments. bench/payments/data-size.sh runs two sizes.
#   BENCH_SCHEMA_SQL=file   SQL run on each PostgreSQL mode's database once migrated, before
#                           any seed: one binary against two schemas, for the cost of an
#                           index (old-wallet-index.sql undoes migration 000027's)
#   CALLGRIND=1             run wallet-api under valgrind's callgrind and report the API's
#                           instructions per payment (counted in the payment windows only):
#                           the figure to compare a hot-path change with its base, since
#                           payments/s on a shared machine swing far more than 3%. Slow: its
#                           defaults become WALLETS=64 PHASE_SECS=60 CONCURRENCIES=16
#                           HOT_CONC=8 HOT_OTPS=400 HOT_SECS=60 SKIP_PG_CEILING=1.
#   TRACING=1               export spans (OTEL_EXPORTER_OTLP_ENDPOINT) to bench/otlp-sink.py,
#                           a stand-in collector: the cost of tracing on (the sink's span
#                           count is in the notes)
#   SERVER_ENV="A=1 B=2"    more settings for the service processes
#   PG_CEILING=path/to/pg-ceiling.sh    default: bench/pg-ceiling/pg-ceiling.sh
#   BENCH_PGHOST/BENCH_PGPORT/BENCH_PGUSER (127.0.0.1/5432/postgres), BENCH_REDIS_PORT (6379)
# The helpers shared with bench/run.sh (service start/stop, clean-up, PostgreSQL and Redis,
# tools, summary) are in bench/lib.sh.
set -euo pipefail

PAY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_TAG=payments
# shellcheck source-path=SCRIPTDIR
source "$PAY_DIR/../lib.sh"
# The hot wallet receives HOT_OTPS payment OTPs within minutes: above the default cap on
# sends per wallet and, since an OTP send resolves the wallet from a phone, above the
# per-integration identification limit. This measures payments, not those limits.
EXTRA_SERVER_ENV=(WALLET_OTP_SENDS_PER_WALLET=1000000 WALLET_RATE_LIMIT=1000000 WALLET_RATE_LIMIT_SANDBOX=1000000
  ${DB_CONNECTIONS:+WALLET_DB_MAX_CONNECTIONS=$DB_CONNECTIONS})
read -r -a extra <<<"${SERVER_ENV:-}"
EXTRA_SERVER_ENV+=(${extra[@]+"${extra[@]}"})
bench_paths "$PAY_DIR" # ROOT, TARGET_DIR, API_BIN, WORKER_BIN, RESULTS, PG_CEILING
BENCH_BIN=$TARGET_DIR/release/payments-bench

clamp() { local v=$1 lo=$2 hi=$3; ((v < lo)) && v=$lo; ((v > hi)) && v=$hi; echo "$v"; }
API_WRAP=()
if [[ -n ${CALLGRIND:-} ]]; then
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
    { echo "CALLGRIND=1 needs valgrind (Debian's valgrind package)" >&2; exit 2; }
  : "${WALLETS:=64}" "${PHASE_SECS:=60}" "${CONCURRENCIES:=16}" "${HOT_CONC:=8}"
  : "${HOT_OTPS:=400}" "${HOT_SECS:=60}" "${SKIP_PG_CEILING:=1}"
fi
WALLETS=$(clamp "${WALLETS:-1024}" 16 100000)
PHASE_SECS=$(clamp "${PHASE_SECS:-10}" 1 60)
CONCURRENCIES=${CONCURRENCIES:-16 64}
HOT_CONC=${HOT_CONC:-32}
HOT_OTPS=$(clamp "${HOT_OTPS:-3000}" 1 20000)
HOT_SECS=$(clamp "${HOT_SECS:-10}" 1 60)
SETUP_CONC=$(clamp "${SETUP_CONC:-4}" 1 64)
MINT_CONC=$(clamp "${MINT_CONC:-32}" 1 256)
PG_SECS=$(clamp "${PG_SECS:-15}" 1 60)
bench_knobs # BENCH_MODES, BENCH_PG*, BENCH_REDIS_PORT; HOST
# The operator credential is verified with bcrypt on every operator call (no cache), and
# setup makes two operator calls per wallet: it is minted at the lowest allowed cost. The
# tenant's platform key is minted at the service default (it is verified once, then cached).
OPERATOR_BCRYPT_COST=10
TENANT_BCRYPT_COST=12
REDIS_DROP_MAX=500000 # most Redis keys drop_redis_prefix deletes
for c in $CONCURRENCIES; do [[ $c =~ ^[0-9]+$ && $c -ge 1 && $c -le 512 ]] || { echo "bad CONCURRENCIES: $CONCURRENCIES" >&2; exit 2; }; done
[[ $HOT_CONC =~ ^[0-9]+$ && $HOT_CONC -le 512 ]] || { echo "bad HOT_CONC: $HOT_CONC" >&2; exit 2; }

scrub_wallet_env

make_workdir /tmp/wallet-payments-bench.XXXXXX
if [[ -n ${TRACING:-} ]]; then
  OTLP_PORT=$(free_port)
  python3 "$ROOT/bench/otlp-sink.py" "$OTLP_PORT" "$WORK/otlp-spans" &
  PIDS+=("$!")
  EXTRA_SERVER_ENV+=(OTEL_EXPORTER_OTLP_ENDPOINT="http://$HOST:$OTLP_PORT")
fi

# ---------------------------------------------------------------- tools ---------------------
need_service_tools

CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

note_tree

# ---------------------------------------------------------------- build ---------------------
build_release -p api -p worker -p payments-bench
[[ -x $API_BIN && -x $WORKER_BIN && -x $BENCH_BIN ]] || die "missing $API_BIN, $WORKER_BIN or $BENCH_BIN"

RESULT_FILES=()
HISTORY_ROWS=() # seeded history and what the run added (SEED_WALLETS)
SEEDED=()
MODE_ROWS=() # "mode|startup_ms|idle_rss|stop_ms|ledger"
NOTES=()

# ---------------------------------------------------------------- seeded history ------------
db_figures() { # db_figures DB: "<database bytes> <payments> <ledger entries>"
  psql_ -d "$1" -Atc "SELECT pg_database_size(current_database()), (SELECT COUNT(*) FROM payments),
    (SELECT COUNT(*) FROM ledger_entries)" | tr '|' ' '
}

# seed_history MODE DB TENANT_JSON: SEED_WALLETS wallets of history (seed-history.sql), timed,
# with the database's size before and after
seed_history() {
  local mode=$1 db=$2 tenant=$3 t0 before after
  read -r -a before <<<"$(db_figures "$db")"
  log "$mode: seeding ${SEED_WALLETS} wallets x ${SEED_PAYMENTS:-4} payments of history into $db"
  t0=$(now_ns)
  psql_ -d "$db" -v merchant="$(jq -er .merchant_id "$tenant")" \
    -v integration="$(jq -er .integration_id "$tenant")" \
    -v program="$(jq -er .wallet_program_id "$tenant")" \
    -v wallets="$SEED_WALLETS" -v payments="${SEED_PAYMENTS:-4}" \
    -f "$PAY_DIR/seed-history.sql" >/dev/null || die "$mode: seeding failed"
  psql_ -d "$db" -c CHECKPOINT >/dev/null
  read -r -a after <<<"$(db_figures "$db")"
  SEEDED=("${before[@]}" "${after[@]}")
  log "$mode: seeded in $((($(now_ns) - t0) / 1000000000)) s: ${after[2]} ledger entries, ${after[1]} payments"
  HISTORY_ROWS+=("| $mode | seeded history | ${after[2]} | $((after[1] - before[1])) | $(mib $(((after[0] - before[0]) / 1024))) | $(per_million $((after[0] - before[0])) $((after[1] - before[1]))) |")
}

# size_after_run MODE DB: what the run's own payments added (every table: idempotency
# records, QR nonces, jobs, deliveries too), per million payments
size_after_run() {
  local mode=$1 db=$2 now
  read -r -a now <<<"$(db_figures "$db")"
  local bytes=$((now[0] - SEEDED[3])) paid=$((now[1] - SEEDED[4]))
  HISTORY_ROWS+=("| $mode | the run's payments (setup included) | ${now[2]} | $paid | $(mib $((bytes / 1024))) | $(per_million "$bytes" "$paid") |")
}

per_million() { # per_million BYTES PAYMENTS: GiB per million payments
  awk -v b="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.2f GiB", b / n * 1e6 / 1073741824; else print "-" }'
}

# ---------------------------------------------------------------- one mode ------------------
bench_mode() {
  local mode=$1
  # set by start_services (bench/lib.sh)
  local addr data_dir api_log worker_log env_common=() worker_pid db prefix api_pid startup_ms
  local api_metrics worker_metrics
  local callgrind_args=()
  if [[ -n ${CALLGRIND:-} ]]; then
    # Not counting until payments-bench switches it on for a payment window.
    API_WRAP=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$WORK/callgrind-$mode.out")
    callgrind_args=(--callgrind-out "$WORK/callgrind-$mode.out")
  fi
  start_services "$mode" "$OPERATOR_BCRYPT_COST" wallet_paybench walletpaybench
  sleep 1
  local api_idle
  api_idle=$(mib "$(status_kib "$api_pid" VmRSS)")
  log "$mode: up in $startup_ms ms, idle RSS $api_idle MiB"

  log "$mode: creating a sandbox tenant and an operator credential"
  create_tenant "$mode" "paybench-$mode"
  env "${env_common[@]}" "$API_BIN" operator create --name "paybench-$mode" --json \
    >"$WORK/operator-$mode.json" 2>"$WORK/operator-$mode.err" ||
    { cat "$WORK/operator-$mode.err" >&2; die "$mode: operator create failed"; }
  local merchant
  merchant=$(jq -er .merchant_id "$WORK/tenant-$mode.json")
  jq -e .operator_key "$WORK/operator-$mode.json" >/dev/null || die "$mode: no operator_key in operator create output"

  if [[ -n ${SEED_WALLETS:-} ]]; then
    [[ -n $db ]] || die "$mode: SEED_WALLETS needs a PostgreSQL mode"
    seed_history "$mode" "$db" "$WORK/tenant-$mode.json"
  fi

  local hot_args=(--hot-concurrency "$HOT_CONC" --hot-otps "$HOT_OTPS" --hot-secs "$HOT_SECS")
  local worker_args=()
  [[ -n $worker_pid ]] && worker_args=(--worker-pid "$worker_pid")
  local out=$WORK/result-$mode.json
  if ! "$BENCH_BIN" run --base "http://$addr" --mode "$mode" \
    --tenant "$WORK/tenant-$mode.json" --operator "$WORK/operator-$mode.json" \
    --wallets "$WALLETS" --secs "$PHASE_SECS" --concurrency "$(tr ' ' ',' <<<"$CONCURRENCIES")" \
    --setup-concurrency "$SETUP_CONC" --mint-concurrency "$MINT_CONC" "${hot_args[@]}" \
    --api-pid "$api_pid" "${worker_args[@]}" "${callgrind_args[@]}" --clk-tck "$CLK_TCK" --out "$out"; then
    tail -n 30 "$api_log" >&2
    die "$mode: payments-bench failed"
  fi
  kill -0 "$api_pid" 2>/dev/null || die "$mode: wallet-api died during the run"
  RESULT_FILES+=("$out")
  if [[ -n ${SEED_WALLETS:-} ]]; then
    size_after_run "$mode" "$db"
  fi

  local stop_ms
  stop_services

  # Every payment went through the ledger: check it still agrees with the balances.
  local ledger="consistent"
  if ! env "${env_common[@]}" "$API_BIN" ledger check --merchant "$merchant" >"$WORK/ledger-$mode.json" 2>"$WORK/ledger-$mode.err"; then
    ledger="INCONSISTENT or failed"
    NOTES+=("$mode: wallet-api ledger check failed: $(head -c 300 "$WORK/ledger-$mode.json" "$WORK/ledger-$mode.err" | tr '\n' ' ')")
  else
    ledger="consistent ($(jq -r '"\(.postings) postings, \(.entries) entries"' "$WORK/ledger-$mode.json" 2>/dev/null || echo ok))"
  fi
  log_problems "$mode: wallet-api" "$api_log"
  [[ -n $worker_pid ]] && log_problems "$mode: wallet-worker" "$worker_log"
  MODE_ROWS+=("$mode|$startup_ms|$api_idle|$stop_ms|$ledger|$(wc -l <"$api_log")")

  drop_state
}

run_modes

# ---------------------------------------------------------------- PostgreSQL ceiling ---------
if [[ -n ${SEED_WALLETS:-} ]]; then
  # The same history under the ceiling's own schema.
  export PG_CEILING_WALLETS=$SEED_WALLETS PG_CEILING_ENTRIES=$((SEED_WALLETS * (2 + 2 * ${SEED_PAYMENTS:-4})))
fi
CEILING_ARGS=()
PG_LINES=()
if [[ -z ${SKIP_PG_CEILING:-} ]]; then
  if [[ -f $PG_CEILING ]]; then
    for c in $CONCURRENCIES; do
      log "PostgreSQL ceiling: $c clients, ${PG_SECS}s ($PG_CEILING)"
      line=$(pg_ceiling_line "$c" "$WORK/pg-$c.err")
      if [[ -n $line ]]; then
        log "$line"
        PG_LINES+=("$line")
        CEILING_ARGS+=(--ceiling "$line")
      else
        cat "$WORK/pg-$c.err" >&2
        NOTES+=("pg-ceiling.sh $c printed no result")
      fi
    done
  else
    NOTES+=("pg-ceiling.sh not found at $PG_CEILING; ceiling skipped")
  fi
fi

# ---------------------------------------------------------------- summary --------------------
if [[ -n ${TRACING:-} ]]; then
  NOTES+=("tracing on (OTEL_EXPORTER_OTLP_ENDPOINT to bench/otlp-sink.py): the sink received $(cat "$WORK/otlp-spans" 2>/dev/null || echo 0) spans")
fi
result_args=()
for f in "${RESULT_FILES[@]}"; do result_args+=(--result "$f"); done
"$BENCH_BIN" report "${result_args[@]}" "${CEILING_ARGS[@]}" >"$WORK/tables.md" ||
  die "payments-bench report failed"
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Payments benchmark results"
  echo
  summary_intro payments-bench
  echo "Settings: WALLETS=$WALLETS, PHASE_SECS=$PHASE_SECS, CONCURRENCIES=\"$CONCURRENCIES\", HOT_CONC=$HOT_CONC, HOT_OTPS=$HOT_OTPS, HOT_SECS=$HOT_SECS, PG_SECS=$PG_SECS${CALLGRIND:+, CALLGRIND=1 (wallet-api under valgrind)}${TRACING:+, TRACING=1 (spans exported)}${SEED_WALLETS:+, SEED_WALLETS=$SEED_WALLETS SEED_PAYMENTS=${SEED_PAYMENTS:-4} (history there before the run; the ceiling has ${PG_CEILING_ENTRIES:-0} entries)}; amount 1 EUR cent per payment."
  echo
  echo "## Service"
  echo
  echo "| mode | start-up ms (exec → first 200 /v1/health) | idle RSS MiB (api) | SIGTERM → exit ms | ledger check after the run | api log lines |"
  echo "|---|---:|---:|---:|---|---:|"
  for r in "${MODE_ROWS[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  cat "$WORK/tables.md"
  if ((${#HISTORY_ROWS[@]})); then
    echo
    echo "## History and database size"
    echo
    echo "| mode | rows | ledger entries after | payments | database grew MiB | per million payments |"
    echo "|---|---|---:|---:|---:|---:|"
    printf '%s\n' "${HISTORY_ROWS[@]}"
  fi
  summary_notes
} >"$WORK/summary.md"
publish_summary
