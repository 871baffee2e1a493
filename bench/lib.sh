# shellcheck shell=bash
# Helpers shared by the benchmark harnesses bench/run.sh and bench/payments/run.sh.
# Sourced, not run: it only defines functions. The caller runs under `set -euo pipefail`
# and sets, before using them:
#   LOG_TAG           the word in front of each log line ("bench", "payments")
#   PG_SECS           seconds of a pg-ceiling.sh run
#   REDIS_DROP_MAX    how many Redis keys drop_redis_prefix deletes at most
#   TENANT_BCRYPT_COST
#   bench_mode MODE   a function, run by run_modes for each mode
# bench_paths, bench_knobs, make_workdir and note_tree set the other globals used here.

bench_paths() { # bench_paths SCRIPT_DIR: the repository's paths; results go to SCRIPT_DIR/results
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) # this file is ROOT/bench/lib.sh
  TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
  API_BIN=$TARGET_DIR/release/wallet-api
  WORKER_BIN=$TARGET_DIR/release/wallet-worker
  RESULTS=$1/results
  PG_CEILING=${PG_CEILING:-$ROOT/bench/pg-ceiling/pg-ceiling.sh}
}

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now_ns() { date +%s%N; }

# Only the WALLET_* variables the harness sets may reach the service: unknown ones are
# rejected at start-up, and a stray real one would change what is measured.
scrub_wallet_env() {
  local v
  while read -r v; do unset "$v"; done < <(compgen -e | grep '^WALLET_' || true)
  unset RUST_LOG
}

bench_knobs() { # the env knobs both harnesses share, with their defaults
  BENCH_MODES=${BENCH_MODES:-embedded production}
  PGHOST_=${BENCH_PGHOST:-127.0.0.1}
  PGPORT_=${BENCH_PGPORT:-5432}
  PGUSER_=${BENCH_PGUSER:-postgres}
  REDIS_PORT=${BENCH_REDIS_PORT:-6379}
  HOST=127.0.0.1 # all traffic stays on loopback
  # TLS to PostgreSQL: by default both the service (sqlx) and pgbench (libpq) negotiate it
  # when the server offers it (sslmode=prefer). BENCH_PG_TLS=off turns it off for both, so
  # service and ceiling stay comparable; on loopback TLS measures the crypto, not the work.
  case ${BENCH_PG_TLS:-default} in
    off) PG_SSLMODE=disable ;;
    default) PG_SSLMODE="" ;;
    *) die "BENCH_PG_TLS is 'off' or unset" ;;
  esac
}

# ---------------------------------------------------------------- cleanup (trap) ----------
make_workdir() { # make_workdir MKTEMP_TEMPLATE: $WORK, what cleanup undoes, and the traps
  WORK=$(mktemp -d "$1")
  PIDS=()           # processes this script started
  DBS=()            # PostgreSQL databases this script created
  REDIS_PREFIXES=() # Redis key prefixes this script used
  trap cleanup EXIT
  trap 'log "interrupted"; exit 130' INT TERM
}

stop_pid() { # stop_pid PID [grace_secs]: TERM, wait (bounded), then KILL
  local pid=$1 grace=${2:-10} i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; forget_pid "$pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid did not stop in ${grace}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  forget_pid "$pid"
}
forget_pid() { # so the exit trap never signals a PID that may have been reused
  local keep=() p
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

psql_() { PGCONNECT_TIMEOUT=5 psql -h "$PGHOST_" -p "$PGPORT_" -U "$PGUSER_" -X -q -v ON_ERROR_STOP=1 "$@"; }
redis_() { timeout 30 redis-cli -h "$HOST" -p "$REDIS_PORT" "$@"; }

drop_redis_prefix() {
  local prefix=$1
  redis_ --scan --pattern "${prefix}*" 2>/dev/null | head -n "$REDIS_DROP_MAX" |
    xargs -r -n 500 redis-cli -h "$HOST" -p "$REDIS_PORT" del >/dev/null 2>&1 || true
}

cleanup() {
  local rc=$? pid db p
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do stop_pid "$pid" 10; done
  for db in "${DBS[@]}"; do
    [[ -n ${BENCH_KEEP_DB:-} ]] && { log "kept database $db (BENCH_KEEP_DB)"; continue; }
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 ||
      log "could not drop database $db"
  done
  for p in "${REDIS_PREFIXES[@]}"; do drop_redis_prefix "$p"; done
  if [[ -n ${POOLER_DIR:-} ]]; then
    [[ -f $POOLER_DIR/pgbouncer.pid ]] && kill "$(cat "$POOLER_DIR/pgbouncer.pid")" 2>/dev/null
    rm -rf "$POOLER_DIR"
  fi
  if [[ -n ${PRIVATE_PG_DIR:-} ]]; then
    "${PRIVATE_PG_CTL[@]}" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$PRIVATE_PG_DIR"
  fi
  # A kept database is only any use with its tenant's keys (tenant-*.json) and the logs.
  if [[ -n ${BENCH_KEEP_DB:-} ]]; then log "kept $WORK (BENCH_KEEP_DB)"; else rm -rf "$WORK"; fi
  exit "$rc"
}

# start_private_pg: a PostgreSQL cluster of this run's own, from the machine's PostgreSQL
# packages, with the server's defaults (autovacuum on, as in production; a shared CI
# server may have it off), on a free port; points the harness (PGPORT_) at it. The exit
# trap stops and removes it. initdb refuses root, so as root it runs as `postgres`.
start_private_pg() {
  local bindir run=() port
  bindir=$(pg_config --bindir 2>/dev/null || true)
  [[ -x $bindir/initdb ]] || bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  [[ -x $bindir/initdb ]] || die "initdb not found (the postgresql server package)"
  PRIVATE_PG_DIR=$(mktemp -d /tmp/wallet-bench-pg.XXXXXX)
  if [[ $(id -u) == 0 ]]; then
    chown postgres:postgres "$PRIVATE_PG_DIR"
    run=(runuser -u postgres --)
  fi
  port=$(free_port)
  "${run[@]}" "$bindir/initdb" -D "$PRIVATE_PG_DIR/data" -A trust -U postgres --no-sync -E UTF8 \
    >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
  PRIVATE_PG_CTL=("${run[@]}" "$bindir/pg_ctl" -D "$PRIVATE_PG_DIR/data")
  "${PRIVATE_PG_CTL[@]}" -o "-p $port -k $PRIVATE_PG_DIR -c listen_addresses=$PGHOST_ -c max_connections=200" \
    -l "$PRIVATE_PG_DIR/server.log" -w -t 60 start >/dev/null || { cat "$PRIVATE_PG_DIR/server.log" >&2; die "private PostgreSQL did not start"; }
  PGPORT_=$port
  log "private PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on port $port (autovacuum $(psql_ -d postgres -Atc 'SHOW autovacuum'))"
}

# ---------------------------------------------------------------- tools ---------------------
need_pkg() { # need_pkg COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2 (Debian)"
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null
  command -v "$1" >/dev/null 2>&1 || die "$1 is still missing after installing $2"
}
need_service_tools() { # jq and curl; the PostgreSQL and Redis clients when they will be used
  need_pkg jq jq
  need_pkg curl curl
  if [[ $BENCH_MODES == *production* || $BENCH_MODES == *pooled* || -z ${SKIP_PG_CEILING:-} ]]; then
    need_pkg psql postgresql-client
    need_pkg redis-cli redis-tools
  fi
  if [[ -z ${SKIP_PG_CEILING:-} ]]; then need_pkg pgbench postgresql-contrib; fi
}

free_port() { # a port nobody listens on; bind races are harmless here (start-up would fail)
  local p _ lo
  # Below the kernel's ephemeral range: a port in it can be taken by any outgoing
  # connection (a client of the private PostgreSQL, say) between this check and the bind.
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((lo > 21000)) || lo=32768
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % (lo - 20000)))
    if ! (exec 3<>"/dev/tcp/$HOST/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  die "no free port found"
}
rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
status_kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
mib() { awk -v k="${1:-0}" 'BEGIN {printf "%.1f", k / 1024}'; }

# ---------------------------------------------------------------- build ---------------------
note_tree() { # COMMIT, DIRTY, LOAD_START, BUILT_FROM: what is measured, and the load before
  # What is measured: the checked-out tree at the time of the build (uncommitted changes included).
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  # bench/ itself is left out: it is not compiled into what is measured.
  DIRTY=$(git -C "$ROOT" status --porcelain --untracked-files=no -- . ':(exclude)bench' 2>/dev/null | grep -q . && echo " (work tree had uncommitted changes outside bench/)" || true)
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  BUILT_FROM="built from"
  if [[ -n ${SKIP_BUILD:-} ]]; then BUILT_FROM="binaries not rebuilt (SKIP_BUILD); tree at"; fi
}

build_release() { # build_release CARGO_ARGS...: cargo build --release CARGO_ARGS (unless SKIP_BUILD)
  if [[ -z ${SKIP_BUILD:-} ]]; then
    log "building release binaries (cargo build --release $*; minutes on 2 cores)"
    local build_start
    build_start=$(now_ns)
    if ! (cd "$ROOT" && cargo build --release "$@") >"$WORK/build.log" 2>&1; then
      tail -n 40 "$WORK/build.log" >&2
      die "release build failed"
    fi
    log "build done in $((($(now_ns) - build_start) / 1000000000)) s"
  fi
  # The tree can move while cargo builds (someone else working in it): say so.
  local commit_after
  commit_after=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  [[ $commit_after == "$COMMIT" ]] || COMMIT="$COMMIT (HEAD moved to $commit_after during the build; the binaries may contain either)"
}

# ---------------------------------------------------------------- one mode ------------------
run_modes() { # bench_mode MODE for each of $BENCH_MODES
  local mode
  for mode in $BENCH_MODES; do
    case $mode in
      embedded | production | pooled) bench_mode "$mode" ;;
      *) die "unknown mode $mode (embedded, production or pooled)" ;;
    esac
  done
}

# wait_health ADDR PID T0_NS -> prints ms from T0 to the first 200 on /v1/health
wait_health() {
  local addr=$1 pid=$2 t0=$3 code i
  for ((i = 0; i < 6000; i++)); do # at most ~60 s
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$addr/v1/health" || true)
    if [[ $code == 200 ]]; then
      echo $((($(now_ns) - t0) / 1000000))
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.005
  done
  return 1
}

# start_services MODE BCRYPT_COST DB_STEM PREFIX_STEM
# Called from bench_mode, whose locals it sets (bash's dynamic scope):
#   addr data_dir api_log worker_log env_common worker_pid db prefix api_pid startup_ms
#   api_metrics worker_metrics (host:port of each process's /metrics listener)
# production: a fresh database DB_STEM_<pid>_<n> (migrated) and Redis prefix
# PREFIX_STEM-<pid>-<time>:, then wallet-worker; both modes: wallet-api, timed from exec
# to its first 200 on /v1/health. WALLET_BCRYPT_COST=BCRYPT_COST for all of them, plus
# the caller's EXTRA_SERVER_ENV (an array of NAME=value, empty by default); BENCH_SCHEMA_SQL
# (a file) runs on the database once migrated. wallet-api runs
# under the caller's API_WRAP (a command prefix such as valgrind; empty by default), which
# must exec the API in the same process; wallet-worker likewise under WORKER_WRAP.
start_services() {
  local mode=$1 bcrypt_cost=$2 db_stem=$3 prefix_stem=$4 port
  port=$(free_port)
  addr=$HOST:$port
  data_dir=$WORK/data-$mode
  api_log=$WORK/api-$mode.log
  worker_log=$WORK/worker-$mode.log
  env_common=(WALLET_DATA_DIR="$data_dir" WALLET_BCRYPT_COST="$bcrypt_cost")
  # A caller's own server settings (bench/payments raises the per-wallet OTP send cap).
  env_common+=("${EXTRA_SERVER_ENV[@]}")

  worker_pid="" db="" prefix=""
  api_metrics=$HOST:$(free_port)
  worker_metrics=$HOST:$(free_port)
  if [[ $mode == production || $mode == pooled ]]; then
    db=${db_stem}_$$_$RANDOM
    prefix="${prefix_stem}-$$-$(date +%s):"
    psql_ -d postgres -c "CREATE DATABASE $db" >/dev/null || die "cannot create database $db"
    DBS+=("$db")
    REDIS_PREFIXES+=("$prefix")
    env_common+=(
      WALLET_DATABASE_URL="postgres://$PGUSER_@$PGHOST_:$PGPORT_/$db${PG_SSLMODE:+?sslmode=$PG_SSLMODE}"
      WALLET_REDIS_URL="redis://$HOST:$REDIS_PORT"
      WALLET_JWT_SECRET="$(rand_hex 32)"
      WALLET_SECRET_KEY="$(rand_hex 32)"
      WALLET_REDIS_PREFIX="$prefix"
    )
    if [[ $mode == pooled ]]; then
      # production, reaching PostgreSQL through PgBouncer in transaction mode (started
      # once per run by the same script the scaled tests use); the job queue and
      # migrations keep the direct URL (docs/scaling.md).
      [[ -n ${POOLER_PORT:-} ]] || {
        POOLER_PORT=$(free_port)
        # Its own directory: pgbouncer runs as postgres, which cannot enter $WORK.
        POOLER_DIR=$(mktemp -d /tmp/wallet-bench-pgbouncer.XXXXXX)
        bash "$ROOT/tests/scaled/pgbouncer.sh" "$POOLER_DIR" "$POOLER_PORT" "$PGPORT_" "${POOLER_POOL_SIZE:-20}" ||
          die "PgBouncer did not start"
      }
      env_common+=(
        WALLET_DATABASE_DIRECT_URL="postgres://$PGUSER_@$PGHOST_:$PGPORT_/$db${PG_SSLMODE:+?sslmode=$PG_SSLMODE}"
        WALLET_DATABASE_URL="postgres://$PGUSER_@$HOST:$POOLER_PORT/$db"
        WALLET_DATABASE_POOLER=transaction
      )
    fi
    log "$mode: migrating database $db"
    env "${env_common[@]}" "$API_BIN" migrate >"$WORK/migrate.log" 2>&1 ||
      { cat "$WORK/migrate.log" >&2; die "migrate failed"; }
    if [[ -n ${BENCH_SCHEMA_SQL:-} ]]; then
      # One binary against two schemas (an index's cost, say): only the database differs.
      log "$mode: applying $BENCH_SCHEMA_SQL to $db"
      psql_ -d "$db" -f "$BENCH_SCHEMA_SQL" >/dev/null || die "$BENCH_SCHEMA_SQL failed"
    fi
    log "$mode: starting wallet-worker"
    env "${env_common[@]}" WALLET_METRICS_LISTEN_ADDR="$worker_metrics" ${WORKER_WRAP[@]+"${WORKER_WRAP[@]}"} "$WORKER_BIN" run >"$worker_log" 2>&1 &
    worker_pid=$!
    PIDS+=("$worker_pid")
    local i
    for ((i = 0; i < 600; i++)); do # up to ~60 s for "wallet-worker running" (valgrind is slow to start)
      grep -q 'wallet-worker running' "$worker_log" 2>/dev/null && break
      kill -0 "$worker_pid" 2>/dev/null || { cat "$worker_log" >&2; die "wallet-worker exited"; }
      sleep 0.1
    done
    grep -q 'wallet-worker running' "$worker_log" || die "wallet-worker did not report running"
  fi

  # start-up: exec -> first 200 on /v1/health
  log "$mode: starting wallet-api on $addr"
  local t0
  t0=$(now_ns)
  env "${env_common[@]}" WALLET_LISTEN_ADDR="$addr" WALLET_METRICS_LISTEN_ADDR="$api_metrics" ${API_WRAP[@]+"${API_WRAP[@]}"} "$API_BIN" serve >"$api_log" 2>&1 &
  api_pid=$!
  PIDS+=("$api_pid")
  startup_ms=$(wait_health "$addr" "$api_pid" "$t0") || { tail -n 30 "$api_log" >&2; die "$mode: wallet-api never answered 200 on /v1/health"; }
}

# create_tenant MODE NAME: a sandbox tenant, its platform key minted at TENANT_BCRYPT_COST,
# written to $WORK/tenant-MODE.json (uses the caller's env_common)
create_tenant() {
  local mode=$1 name=$2
  env "${env_common[@]}" WALLET_BCRYPT_COST="$TENANT_BCRYPT_COST" "$API_BIN" tenant create \
    --name "$name" --sandbox --currency EUR --branches 1 --json \
    >"$WORK/tenant-$mode.json" 2>"$WORK/tenant-$mode.err" ||
    { cat "$WORK/tenant-$mode.err" >&2; die "$mode: tenant create failed"; }
}

# stop_services: API first, like a rolling deploy, then the worker; sets the caller's
# stop_ms (SIGTERM -> exit of the API)
stop_services() {
  local t2
  t2=$(now_ns)
  stop_pid "$api_pid" 15
  stop_ms=$((($(now_ns) - t2) / 1000000))
  if [[ -n $worker_pid ]]; then stop_pid "$worker_pid" 15; fi
}

# drop_state: the caller's database, Redis keys and data directory
drop_state() {
  if [[ -n $db && -z ${BENCH_KEEP_DB:-} ]]; then
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || log "could not drop $db"
    drop_redis_prefix "$prefix"
  fi
  rm -rf "$data_dir"
}

log_problems() { # log_problems NAME FILE: a note when the log has WARN/ERROR lines
  local name=$1 file=$2 n
  n=$(grep -ciE '"level":"(ERROR|WARN)"| ERROR | WARN ' "$file" || true)
  if ((n > 0)); then
    NOTES+=("$name logged $n WARN/ERROR lines; first: $(grep -m1 -iE '"level":"(ERROR|WARN)"| ERROR | WARN ' "$file" | cut -c1-300)")
  fi
}

# ---------------------------------------------------------------- PostgreSQL ceiling ---------
# pg_ceiling_line CLIENTS ERR_FILE: the pg_ceiling line of one pg-ceiling.sh run (PG_SECS
# seconds), or nothing; its stderr goes to ERR_FILE
pg_ceiling_line() {
  # Loading ENTRIES of history first takes about a minute per two million here.
  env PGHOST="$PGHOST_" PGPORT="$PGPORT_" PGUSER="$PGUSER_" ${PG_SSLMODE:+PGSSLMODE=$PG_SSLMODE} \
    timeout $((PG_SECS + 300 + ${PG_CEILING_ENTRIES:-0} / 20000)) \
    bash "$PG_CEILING" "$1" "$PG_SECS" "${PG_CEILING_WALLETS:-100000}" "${PG_CEILING_ENTRIES:-0}" 2>"$2" |
    grep '^pg_ceiling' || true
}

# ---------------------------------------------------------------- summary --------------------
summary_intro() { # summary_intro LOAD_GENERATOR: when, what was built, the machine, the load
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $BUILT_FROM commit $COMMIT$DIRTY, $(nproc) cores,"\
    "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load generator $1 on the same host (127.0.0.1)."
  echo "Load average (1/5/15 min) before the run: $LOAD_START; after it: $LOAD_END (other work on the machine shows here)."
  local tls="as negotiated by default (sslmode=prefer; the local server offers it)"
  [[ -n $PG_SSLMODE ]] && tls="off (sslmode=$PG_SSLMODE, BENCH_PG_TLS=off)"
  echo "TLS to PostgreSQL, for the service and pg-ceiling.sh alike: $tls."
}

summary_notes() {
  local n
  if ((${#NOTES[@]} > 0)); then
    echo
    echo "## Notes"
    echo
    for n in "${NOTES[@]}"; do echo "- $n"; done
  fi
}

publish_summary() { # $WORK/summary.md to $RESULTS/latest.md and to stdout
  mkdir -p "$RESULTS"
  cp "$WORK/summary.md" "$RESULTS/latest.md"
  echo
  cat "$WORK/summary.md"
  echo
  log "written to ${RESULTS#"$ROOT"/}/latest.md"
}
