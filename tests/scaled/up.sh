#!/usr/bin/env bash
# Starts the scaled topology the "scaled" test mode runs against, all on loopback, from
# Debian's packages, under one state dir (default /tmp/wallet-scaled):
#   - a PostgreSQL primary of its own            127.0.0.1:$PRIMARY_PORT (55432)
#   - PgBouncer 1.18 in transaction mode before it 127.0.0.1:$POOLER_PORT (56432)
#   - a streaming replica of the primary            127.0.0.1:$REPLICA_PORT (55433)
#   - a Redis Cluster, three masters and a replica of each, 127.0.0.1:$REDIS_CLUSTER_PORT.. (21001-21006)
# and writes the test harness' environment to $STATE/env (source it).
#
# Idempotent: what already runs is left running. `tests/scaled/down.sh` stops it all.
set -euo pipefail
cd "$(dirname "$0")/../.."

STATE=${WALLET_SCALED_STATE:-/tmp/wallet-scaled}
PRIMARY_PORT=${PRIMARY_PORT:-55432}
POOLER_PORT=${POOLER_PORT:-56432}
REPLICA_PORT=${REPLICA_PORT:-55433}
REDIS_CLUSTER_PORT=${REDIS_CLUSTER_PORT:-21001}

say() { printf '[scaled] %s\n' "$*" >&2; }

# PostgreSQL's server binaries: pg_config's, else the newest under /usr/lib/postgresql.
pg_bin() {
  local d
  d=$(pg_config --bindir 2>/dev/null || true)
  if [[ -n $d && -x $d/initdb ]]; then echo "$d"; return; fi
  ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1
}
BIN=$(pg_bin)

# initdb, pg_ctl and pgbouncer refuse to run as root.
as_postgres() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

mkdir -p "$STATE"
[[ $(id -u) == 0 ]] && chown postgres:postgres "$STATE"

wait_for() { # what, command...
  local what=$1; shift
  for _ in $(seq 1 120); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  say "$what did not come up"; return 1
}

# --- PostgreSQL primary -------------------------------------------------------------------
start_primary() {
  local data=$STATE/primary
  if pg_isready -h 127.0.0.1 -p "$PRIMARY_PORT" -q 2>/dev/null; then return; fi
  if [[ ! -f $data/PG_VERSION ]]; then
    say "initdb primary"
    as_postgres "$BIN/initdb" -D "$data" -A trust -U postgres --no-sync -E UTF8 >/dev/null
    cat >>"$data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PRIMARY_PORT
unix_socket_directories = '$STATE'
max_connections = 400
wal_level = replica
max_wal_senders = 8
hot_standby = on
# A test server: durability is the primary's own tests' business (tests/src/cluster.rs).
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    echo "host replication all 127.0.0.1/32 trust" >>"$data/pg_hba.conf"
  fi
  say "starting primary on $PRIMARY_PORT"
  as_postgres "$BIN/pg_ctl" -D "$data" -l "$STATE/primary.log" -w -t 60 start >/dev/null
}

# --- PgBouncer ----------------------------------------------------------------------------
start_pooler() {
  say "PgBouncer (transaction mode) on $POOLER_PORT"
  bash tests/scaled/pgbouncer.sh "$STATE/pgbouncer" "$POOLER_PORT" "$PRIMARY_PORT"
}

# --- Streaming replica --------------------------------------------------------------------
start_replica() {
  local data=$STATE/replica
  if pg_isready -h 127.0.0.1 -p "$REPLICA_PORT" -q 2>/dev/null; then return; fi
  if [[ ! -f $data/PG_VERSION ]]; then
    say "pg_basebackup -R: replica of the primary"
    as_postgres "$BIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -D "$data" -R -X stream --no-sync
  fi
  say "starting replica on $REPLICA_PORT"
  as_postgres "$BIN/pg_ctl" -D "$data" -o "-p $REPLICA_PORT" -l "$STATE/replica.log" -w -t 60 start >/dev/null
}

start_primary
start_pooler
start_replica
say "Redis Cluster (three masters, a replica each) on $REDIS_CLUSTER_PORT.."
REDIS_SEEDS=$(bash tests/scaled/redis-cluster.sh "$STATE/redis" "$REDIS_CLUSTER_PORT" 3 1)

cat >"$STATE/env" <<EOF
export WALLET_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:$PRIMARY_PORT/postgres
export WALLET_TEST_POOLER_URL=postgres://postgres@127.0.0.1:$POOLER_PORT
export WALLET_TEST_REPLICA_URL=postgres://postgres@127.0.0.1:$REPLICA_PORT
export WALLET_TEST_REDIS_URL=$REDIS_SEEDS
export WALLET_TEST_REDIS_MODE=cluster
EOF
say "ready: source $STATE/env"
