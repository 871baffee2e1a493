#!/usr/bin/env bash
# Benchmark harness: builds the release binaries, then for each mode (embedded, production)
# starts the service, measures start-up time and idle RSS, creates a tenant, runs three
# short load phases with wrk against 127.0.0.1 and records req/s, p50, p99, errors and peak
# RSS, then the security-perimeter phases (T trivial 404, C authenticated read, R idempotent
# replay, at 32 connections, in interleaved rounds: C/T and R/T); then runs the PostgreSQL ceiling (bench/pg-ceiling/pg-ceiling.sh) and prints one summary,
# also written to bench/results/latest.md. See bench/README.md.
#
# Usage: bench/run.sh            (from anywhere)
# Knobs (env, all optional):
#   BENCH_MODES="embedded production"   which modes to run
#   CAPS_SECS=5 REPLAY_SECS=5 CREATE_SECS=5 PG_SECS=15   phase lengths (each capped at 15 s)
#   CAPS_CONNS=16 REPLAY_CONNS=16 CREATE_CONNS=4 PG_CLIENTS=16
#   PERIM_SECS=6 PERIM_ROUNDS=2 PERIM_CONNS=32   perimeter phases: seconds per phase per round
#   PERIM_TARGET_PCT=50                 target for C/T and R/T
#   REPLAY_CHECK_EVERY=100              perimeter R: check every Nth response's body per thread
#   SKIP_BUILD=1                        use the binaries already in target/release
#   SKIP_PG_CEILING=1                   do not run the PostgreSQL ceiling
#   PG_CEILING=path/to/pg-ceiling.sh    default: bench/pg-ceiling/pg-ceiling.sh
#   BENCH_PGHOST/BENCH_PGPORT/BENCH_PGUSER (127.0.0.1/5432/postgres), BENCH_REDIS_PORT (6379)
# The helpers shared with bench/payments/run.sh (service start/stop, clean-up, PostgreSQL
# and Redis, tools, summary) are in bench/lib.sh.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_TAG=bench
# shellcheck source-path=SCRIPTDIR
source "$BENCH_DIR/lib.sh"
EXTRA_SERVER_ENV=()
bench_paths "$BENCH_DIR" # ROOT, TARGET_DIR, API_BIN, WORKER_BIN, RESULTS, PG_CEILING
LUA=$BENCH_DIR/wrk/bench.lua

MAX_PHASE_SECS=15
clamp() { local v=$1; ((v < 1)) && v=1; ((v > MAX_PHASE_SECS)) && v=$MAX_PHASE_SECS; echo "$v"; }
CAPS_SECS=$(clamp "${CAPS_SECS:-5}")
REPLAY_SECS=$(clamp "${REPLAY_SECS:-5}")
CREATE_SECS=$(clamp "${CREATE_SECS:-5}")
PG_SECS=$(clamp "${PG_SECS:-15}")
CAPS_CONNS=${CAPS_CONNS:-16}
REPLAY_CONNS=${REPLAY_CONNS:-16}
CREATE_CONNS=${CREATE_CONNS:-4}
PG_CLIENTS=${PG_CLIENTS:-16}
PERIM_SECS=$(clamp "${PERIM_SECS:-6}")
PERIM_ROUNDS=${PERIM_ROUNDS:-2}
((PERIM_ROUNDS >= 1 && PERIM_ROUNDS <= 10)) || { echo "PERIM_ROUNDS must be 1..10" >&2; exit 2; }
PERIM_CONNS=${PERIM_CONNS:-32}
PERIM_TARGET_PCT=${PERIM_TARGET_PCT:-50}
REPLAY_CHECK_EVERY=${REPLAY_CHECK_EVERY:-100}
bench_knobs # BENCH_MODES, BENCH_PG*, BENCH_REDIS_PORT; HOST
# Keys minted during the bench (the replayed create and the fresh creates) use the lowest
# allowed bcrypt cost; the tenant's platform key is minted at the service default.
SERVER_BCRYPT_COST=10
TENANT_BCRYPT_COST=12
REDIS_DROP_MAX=200000 # most Redis keys drop_redis_prefix deletes

scrub_wallet_env

make_workdir /tmp/wallet-bench.XXXXXX

# ---------------------------------------------------------------- tools ---------------------
need_pkg wrk wrk
need_service_tools

uuid() { cat /proc/sys/kernel/random/uuid; }
reset_hwm() { echo 5 >"/proc/$1/clear_refs" 2>/dev/null || true; } # resets VmHWM to VmRSS
# cpu_ticks PID: user+system CPU time of the process (all threads), in clock ticks
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
load1() { cut -d' ' -f1 /proc/loadavg; }

note_tree

# ---------------------------------------------------------------- build ---------------------
build_release -p api -p worker
[[ -x $API_BIN && -x $WORKER_BIN ]] || die "missing $API_BIN or $WORKER_BIN"

# ---------------------------------------------------------------- result rows --------------
MODE_ROWS=()  # one per mode
PHASE_ROWS=() # "mode|phase|conns|secs|requests|rps|p50|p99|errors|api_peak|worker_peak|api_cpu_us_per_req"
PERIM_ROWS=() # "mode|round|letter|phase|conns|secs|requests|duration_s|rps|p50|p99|errors|api_cpu_us|checked|missing|load1"
PERIM_LOAD=() # "mode|load1 before|load1 after"
NOTES=()

# run_phase MODE PHASE KIND CONNS SECS API_PID WORKER_PID ADDR [PERIM_ROUND PERIM_LETTER]
# (BENCH_* env already set). With PERIM_ROUND the row goes to the perimeter table.
run_phase() {
  local mode=$1 phase=$2 kind=$3 conns=$4 secs=$5 api_pid=$6 worker_pid=$7 addr=$8
  local round=${9:-} letter=${10:-}
  local threads=2 out line cpu0 cpu1 la
  ((conns < threads)) && threads=$conns
  out=$WORK/wrk-$mode-$kind${round:+-r$round}.txt
  reset_hwm "$api_pid"
  [[ -n $worker_pid ]] && reset_hwm "$worker_pid"
  la=$(load1)
  log "$mode: phase ${letter:+($letter) }$phase${round:+ round $round}: $conns connections, ${secs}s"
  cpu0=$(cpu_ticks "$api_pid")
  BENCH_KIND=$kind timeout $((secs + 60)) wrk -t "$threads" -c "$conns" -d "${secs}s" \
    --timeout 10s -s "$LUA" "http://$addr" >"$out" 2>&1 || {
    cat "$out" >&2
    die "wrk failed in phase $phase"
  }
  cpu1=$(cpu_ticks "$api_pid")
  line=$(grep '^BENCH ' "$out" || true)
  [[ -n $line ]] || { cat "$out" >&2; die "no BENCH line from wrk in phase $phase"; }
  kill -0 "$api_pid" 2>/dev/null || die "wallet-api died during phase $phase"
  local api_peak worker_peak="" kv requests rps p50 p99 non2xx sock statuses errors
  local duration checked=0 missing=0 cpu_us="-"
  api_peak=$(mib "$(status_kib "$api_pid" VmHWM)")
  [[ -n $worker_pid ]] && worker_peak=$(mib "$(status_kib "$worker_pid" VmHWM)")
  for kv in ${line#BENCH }; do
    case $kv in
      requests=*) requests=${kv#*=} ;;
      duration_s=*) duration=${kv#*=} ;;
      checked=*) checked=${kv#*=} ;;
      flag_missing=*) missing=${kv#*=} ;;
      rps=*) rps=${kv#*=} ;;
      p50_ms=*) p50=${kv#*=} ;;
      p99_ms=*) p99=${kv#*=} ;;
      non2xx=*) non2xx=${kv#*=} ;;
      socket_errors=*) sock=${kv#*=} ;;
      statuses=*) statuses=${kv#*=} ;;
    esac
  done
  # API CPU (user+system, all threads) per response. wrk stops sending at the end but a
  # few in-flight requests may finish after it: noise of well under 1%.
  ((requests > 0)) && cpu_us=$(awk -v t=$((cpu1 - cpu0)) -v hz="$CLK_TCK" -v n="$requests" 'BEGIN {printf "%.0f", t / hz * 1e6 / n}')
  errors=$((non2xx + sock))
  if ((errors > 0)); then
    errors="$errors (http ${statuses}; socket $sock)"
    NOTES+=("$mode/${letter:+($letter) }$phase${round:+ round $round}: $errors")
  fi
  if ((checked > 0 && missing > 0)); then
    NOTES+=("$mode/${letter:+($letter) }$phase${round:+ round $round}: $missing of $checked sampled responses lacked \"idempotency_replayed\":true")
  fi
  if [[ -n $round ]]; then
    PERIM_ROWS+=("$mode|$round|$letter|$phase|$conns|$secs|$requests|$duration|$rps|$p50|$p99|$errors|$cpu_us|$checked|$missing|$la")
  else
    PHASE_ROWS+=("$mode|$phase|$conns|$secs|$requests|$rps|$p50|$p99|$errors|$api_peak|${worker_peak:--}|$cpu_us")
  fi
  log "$mode: $phase${round:+ round $round}: $rps req/s, p50 $p50 ms, p99 $p99 ms, errors $errors, peak RSS $api_peak MiB, api CPU $cpu_us µs/req$( ((checked > 0)) && echo " (replay flag: $checked sampled, $missing missing)")"
}

# ---------------------------------------------------------------- one mode ------------------
bench_mode() {
  local mode=$1
  # set by start_services (bench/lib.sh)
  local addr data_dir api_log worker_log env_common=() worker_pid db prefix api_pid startup_ms
  local api_metrics worker_metrics
  local worker_idle="-"
  start_services "$mode" "$SERVER_BCRYPT_COST" wallet_bench walletbench
  local self_ready
  self_ready=$(grep -oE 'ready in [0-9]+ ms|"ready_ms":[0-9]+' "$api_log" | grep -oE '[0-9]+' | head -n1 || true)
  sleep 2
  local api_idle
  api_idle=$(mib "$(status_kib "$api_pid" VmRSS)")
  [[ -n $worker_pid ]] && worker_idle=$(mib "$(status_kib "$worker_pid" VmRSS)")
  log "$mode: up in $startup_ms ms (self-reported ${self_ready:-?} ms), idle RSS $api_idle MiB"

  # tenant (platform key at the service's default bcrypt cost)
  log "$mode: creating a tenant"
  create_tenant "$mode" "bench-$mode"
  local key merchant brand branch
  key=$(jq -er .platform_key "$WORK/tenant-$mode.json")
  merchant=$(jq -er .merchant_id "$WORK/tenant-$mode.json")
  brand=$(jq -er .brand_id "$WORK/tenant-$mode.json")
  branch=$(jq -er '.branch_ids[0]' "$WORK/tenant-$mode.json")
  export BENCH_API_KEY=$key

  # (a) authenticated read. One call first: it pays the bcrypt verify and fills the cache.
  local t1 first_auth_ms code
  t1=$(now_ns)
  code=$(curl -s -o "$WORK/caps.json" -w '%{http_code}' --max-time 10 -H "x-api-key: $key" "http://$addr/v1/capabilities" || true)
  first_auth_ms=$((($(now_ns) - t1) / 1000000))
  [[ $code == 200 ]] || { cat "$WORK/caps.json" >&2; die "$mode: GET /v1/capabilities answered $code"; }
  run_phase "$mode" "GET /v1/capabilities" caps "$CAPS_CONNS" "$CAPS_SECS" "$api_pid" "$worker_pid" "$addr"

  # (b) replay of one stored create: same Idempotency-Key, same body, every request.
  local body_tpl idem body
  body_tpl=$(jq -cn --arg m "$merchant" --arg b "$brand" --arg br "$branch" '{
    meta: {partner_request_id: "__PRID__", api_version: "2026-06-01"},
    context: {merchant_id: $m}, enterprise_id: $m, brand_id: $b, branch_id: $br, label: "bench"}')
  idem=$(uuid)
  body=${body_tpl//__PRID__/$(uuid)}
  code=$(curl -s -o "$WORK/create.json" -w '%{http_code}' --max-time 30 -X POST \
    -H "x-api-key: $key" -H "Idempotency-Key: $idem" -H 'Content-Type: application/json' \
    --data "$body" "http://$addr/v1/auth/keys" || true)
  [[ $code == 2* ]] || { cat "$WORK/create.json" >&2; die "$mode: POST /v1/auth/keys answered $code"; }
  code=$(curl -s -o "$WORK/replay.json" -w '%{http_code}' --max-time 30 -X POST \
    -H "x-api-key: $key" -H "Idempotency-Key: $idem" -H 'Content-Type: application/json' \
    --data "$body" "http://$addr/v1/auth/keys" || true)
  [[ $code == 2* ]] || { cat "$WORK/replay.json" >&2; die "$mode: replayed POST /v1/auth/keys answered $code"; }
  [[ $(jq -r '.meta.idempotency_replayed' "$WORK/replay.json") == true ]] ||
    NOTES+=("$mode: the replay check response did not carry meta.idempotency_replayed=true")
  [[ $(jq -r '.data.key_id' "$WORK/replay.json") == $(jq -r '.data.key_id' "$WORK/create.json") ]] ||
    NOTES+=("$mode: the replay returned a different key_id than the create")
  BENCH_BODY=$body BENCH_IDEM_KEY=$idem \
    run_phase "$mode" "POST /v1/auth/keys replay" replay "$REPLAY_CONNS" "$REPLAY_SECS" "$api_pid" "$worker_pid" "$addr"

  # Security perimeter: (T) a 404 through the whole middleware stack, (C) the authenticated
  # read, (R) the replay of the create above (every answer must be 200 and replayed), all at
  # PERIM_CONNS connections against this same server, interleaved T C R T C R ... so that a
  # change in the machine's load during the run hits all three alike.
  local r la0
  la0=$(load1)
  for ((r = 1; r <= PERIM_ROUNDS; r++)); do
    BENCH_EXPECT=404 \
      run_phase "$mode" "GET /v1/this-route-does-not-exist (404)" trivial "$PERIM_CONNS" "$PERIM_SECS" "$api_pid" "$worker_pid" "$addr" "$r" T
    run_phase "$mode" "GET /v1/capabilities" caps "$PERIM_CONNS" "$PERIM_SECS" "$api_pid" "$worker_pid" "$addr" "$r" C
    BENCH_BODY=$body BENCH_IDEM_KEY=$idem BENCH_EXPECT=200 BENCH_CHECK_EVERY=$REPLAY_CHECK_EVERY \
      run_phase "$mode" "POST /v1/auth/keys replay" replay "$PERIM_CONNS" "$PERIM_SECS" "$api_pid" "$worker_pid" "$addr" "$r" R
  done
  PERIM_LOAD+=("$mode|$la0|$(load1)")

  # (c) fresh creates: a new key (bcrypt at cost 10) per request.
  BENCH_BODY=${body_tpl/\"label\":\"bench\"/\"label\":\"bench-fresh\"} BENCH_SEED=$RANDOM \
    run_phase "$mode" "POST /v1/auth/keys fresh (cost 10)" create "$CREATE_CONNS" "$CREATE_SECS" "$api_pid" "$worker_pid" "$addr"

  # stop (API first, like a rolling deploy), then drop state
  local stop_ms log_lines log_mib
  stop_services
  log_lines=$(wc -l <"$api_log")
  log_mib=$(mib $(($(stat -c %s "$api_log") / 1024)))
  log_problems "$mode: wallet-api" "$api_log"
  if [[ -n $worker_pid ]]; then log_problems "$mode: wallet-worker" "$worker_log"; fi
  MODE_ROWS+=("$mode|$startup_ms|${self_ready:--}|$api_idle|$worker_idle|$first_auth_ms|$stop_ms|$log_lines ($log_mib MiB)")
  drop_state
  unset BENCH_API_KEY
}

run_modes

# ---------------------------------------------------------------- PostgreSQL ceiling ---------
PG_LINE="" PG_TPS=""
if [[ -z ${SKIP_PG_CEILING:-} ]]; then
  if [[ -x $PG_CEILING || -f $PG_CEILING ]]; then
    log "PostgreSQL ceiling: $PG_CLIENTS clients, ${PG_SECS}s ($PG_CEILING)"
    PG_LINE=$(pg_ceiling_line "$PG_CLIENTS" "$WORK/pg.err")
    [[ -n $PG_LINE ]] || { cat "$WORK/pg.err" >&2; NOTES+=("pg-ceiling.sh printed no result"); }
    PG_TPS=$(grep -oE 'tps=[0-9.]+' <<<"$PG_LINE" | cut -d= -f2 || true)
    log "$PG_LINE"
  else
    NOTES+=("pg-ceiling.sh not found at $PG_CEILING; ceiling skipped")
  fi
fi

# ---------------------------------------------------------------- summary --------------------
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Benchmark results"
  echo
  summary_intro wrk
  echo "Server WALLET_BCRYPT_COST=$SERVER_BCRYPT_COST (keys minted during the run); platform key minted at cost $TENANT_BCRYPT_COST."
  echo
  echo "## Start-up and memory"
  echo
  echo "| mode | start-up ms (exec → first 200 /v1/health) | self-reported ready ms | idle RSS MiB (api) | idle RSS MiB (worker) | first authenticated call ms (bcrypt verify) | SIGTERM → exit ms | api log lines |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for r in "${MODE_ROWS[@]}"; do echo "| ${r//|/ | } |"; done
  echo
  echo "## Load phases"
  echo
  echo "| mode | phase | conns | secs | requests | req/s | p50 ms | p99 ms | errors | peak RSS MiB (api) | peak RSS MiB (worker) | api CPU µs/req | req/s ÷ pg_ceiling tps |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
  for r in "${PHASE_ROWS[@]}"; do
    IFS='|' read -r m ph c s n rps p50 p99 err ap wp cpu <<<"$r"
    ratio="-"
    if [[ $m == production && -n $PG_TPS ]]; then
      ratio=$(awk -v a="$rps" -v b="$PG_TPS" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')
    fi
    echo "| $m | $ph | $c | $s | $n | $rps | $p50 | $p99 | $err | $ap | $wp | $cpu | $ratio |"
  done
  if ((${#PERIM_ROWS[@]} > 0)); then
    echo
    echo "## Security perimeter cost ($PERIM_CONNS connections, wrk 2 threads, same server, rounds T C R × $PERIM_ROUNDS of ${PERIM_SECS} s each)"
    echo
    echo "T = \`GET /v1/this-route-does-not-exist\` (404 NOT_FOUND through the whole middleware stack, no I/O; 404 counts as success),"
    echo "C = \`GET /v1/capabilities\` with a valid \`x-api-key\` (key cache warm), R = replay of one stored \`POST /v1/auth/keys\` (must be 200 with \`meta.idempotency_replayed: true\`)."
    echo "req/s per phase = all its requests ÷ all its seconds over the rounds; p50/p99 are per round (round 1 / round 2 ...)."
    echo "Target: C/T and R/T ≥ ${PERIM_TARGET_PCT}%."
    echo
    echo "| mode | phase | requests | req/s | p50 ms (per round) | p99 ms (per round) | errors | api CPU µs/req (per round) | replay flag: sampled / missing | % of T (req/s) | target ≥ ${PERIM_TARGET_PCT}% |"
    echo "|---|---|---:|---:|---|---|---|---|---|---:|---|"
    local_modes=$(for r in "${PERIM_ROWS[@]}"; do echo "${r%%|*}"; done | awk '!seen[$0]++')
    for m in $local_modes; do
      t_rps=""
      for L in T C R; do
        n_tot=0 d_tot=0 p50s="" p99s="" cpus="" errs="" chk=0 mis=0 phname="" err_tot=0
        for r in "${PERIM_ROWS[@]}"; do
          IFS='|' read -r pm rd pl ph c s n d rps p50 p99 err cpu ck ms la <<<"$r"
          [[ $pm == "$m" && $pl == "$L" ]] || continue
          phname=$ph
          n_tot=$((n_tot + n))
          d_tot=$(awk -v a="$d_tot" -v b="$d" 'BEGIN {printf "%.3f", a + b}')
          p50s+="${p50s:+ / }$p50"; p99s+="${p99s:+ / }$p99"; cpus+="${cpus:+ / }$cpu"
          e=${err%% *}; err_tot=$((err_tot + e))
          [[ $e == 0 ]] || errs+="${errs:+; }r$rd: $err"
          chk=$((chk + ck)); mis=$((mis + ms))
        done
        [[ -n $phname ]] || continue
        rps_all=$(awk -v n="$n_tot" -v d="$d_tot" 'BEGIN {if (d > 0) printf "%.1f", n / d; else print 0}')
        flag="-"; [[ $L == R ]] && flag="$chk / $mis"
        pct="-" verdict="-"
        if [[ $L == T ]]; then
          t_rps=$rps_all; pct="100%"
        elif [[ -n $t_rps ]]; then
          pct=$(awk -v a="$rps_all" -v b="$t_rps" 'BEGIN {printf "%.1f%%", 100 * a / b}')
          verdict=$(awk -v a="$rps_all" -v b="$t_rps" -v tg="$PERIM_TARGET_PCT" 'BEGIN {
            p = 100 * a / b; if (p >= tg) printf "met (+%.1f pts)", p - tg; else printf "**missed by %.1f pts**", tg - p}')
        fi
        echo "| $m | ($L) $phname | $n_tot | $rps_all | $p50s | $p99s | ${errs:-$err_tot} | $cpus | $flag | $pct | $verdict |"
      done
    done
    echo
    echo "Per round (req/s; the spread between rounds is the noise on this machine):"
    echo
    echo "| mode | round | T req/s | C req/s | R req/s | C/T | R/T | load avg (1 min) at T's start |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for m in $local_modes; do
      for ((rd = 1; rd <= PERIM_ROUNDS; rd++)); do
        tr="" cr="" rr="" tla=""
        for r in "${PERIM_ROWS[@]}"; do
          IFS='|' read -r pm prd pl ph c s n d rps p50 p99 err cpu ck ms la <<<"$r"
          [[ $pm == "$m" && $prd == "$rd" ]] || continue
          case $pl in T) tr=$rps; tla=$la ;; C) cr=$rps ;; R) rr=$rps ;; esac
        done
        [[ -n $tr ]] || continue
        echo "| $m | $rd | $tr | $cr | $rr | $(awk -v a="$cr" -v b="$tr" 'BEGIN {printf "%.1f%%", 100 * a / b}') | $(awk -v a="$rr" -v b="$tr" 'BEGIN {printf "%.1f%%", 100 * a / b}') | $tla |"
      done
    done
    for r in "${PERIM_LOAD[@]}"; do
      IFS='|' read -r m a b <<<"$r"
      echo
      echo "$m: load average (1 min) $a before the perimeter phases, $b after."
    done
  fi
  echo
  echo "## PostgreSQL ceiling (pg-ceiling.sh, payment-shaped transaction, pgbench)"
  echo
  echo '```'
  echo "${PG_LINE:-not run}"
  echo '```'
  summary_notes
} >"$WORK/summary.md"
publish_summary
