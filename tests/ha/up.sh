#!/usr/bin/env bash
# Starts the HA rig the failover and point-in-time-recovery drills run against, on loopback,
# from Debian's packages (installed when missing), under one state dir (default
# /tmp/wallet-ha):
#   - one etcd member (the DCS)                                 127.0.0.1:$ETCD_PORT (22379)
#   - two PostgreSQL nodes under Patroni, synchronous replication
#       node1: PostgreSQL 127.0.0.1:25532, Patroni REST 127.0.0.1:28008
#       node2: PostgreSQL 127.0.0.1:25533, Patroni REST 127.0.0.1:28009
#   - HAProxy sending the service to whichever node Patroni says is primary
#       read-write 127.0.0.1:$RW_PORT (25500), read-only (replicas) 127.0.0.1:$RO_PORT (25501)
#   - pgBackRest archiving every node's WAL to one repository ($STATE/backrest)
#   - a Redis Cluster, three masters and a replica each          127.0.0.1:21101..21106
# and writes the environment the drills read to $STATE/env (source it).
#
# HA_SYNC=on (default) or off sets Patroni's synchronous_mode; run again to switch it.
# Idempotent: what already runs is left running, and a node that was killed is started
# again (it rejoins as a replica of the current primary, rewound with pg_rewind if it had
# diverged). `tests/ha/down.sh` stops it all.
set -euo pipefail
cd "$(dirname "$0")/../.."

STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
ETCD_PORT=${ETCD_PORT:-22379}
RW_PORT=${RW_PORT:-25500}
RO_PORT=${RO_PORT:-25501}
REDIS_PORT=${HA_REDIS_PORT:-21101}
HA_SYNC=${HA_SYNC:-on}
NODES=(node1 node2)
declare -A PG_PORT=([node1]=25532 [node2]=25533)
declare -A REST_PORT=([node1]=28008 [node2]=28009)

say() { printf '[ha] %s\n' "$*" >&2; }

# --- packages -----------------------------------------------------------------------------
need=()
command -v patroni >/dev/null 2>&1 || need+=(patroni)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v pgbackrest >/dev/null 2>&1 || need+=(pgbackrest)
# The PostgreSQL server and psql: Patroni only suggests them.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
if ((${#need[@]})); then
  say "installing ${need[*]} (Debian's packages)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >/dev/null
fi

BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
# Patroni, initdb and pgBackRest's archive-push run as the postgres user.
as_postgres() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
mkdir -p "$STATE"
[[ $(id -u) == 0 ]] && chown postgres:postgres "$STATE"

wait_for() { # what, seconds, command...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 $((secs * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  say "$what did not come up"; return 1
}
# Whether the pid in `pidfile` is alive and still the program named by `pattern`.
alive() { [[ -f $1 ]] && grep -qF -- "$2" "/proc/$(cat "$1")/cmdline" 2>/dev/null; }
# Starts `command...` as postgres in a session of its own, detached, output to `log`; its
# own pid (not runuser's) goes to `pidfile`, so a SIGKILL there kills the program itself.
spawn() { # pidfile, log, command...
  local pidfile=$1 log=$2; shift 2
  as_postgres setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >>"$log" 2>&1 </dev/null &
  for _ in $(seq 1 40); do [[ -s $pidfile ]] && return 0; sleep 0.05; done
  say "$* did not start"; return 1
}

# --- etcd ---------------------------------------------------------------------------------
if ! alive "$STATE/etcd/etcd.pid" "$STATE/etcd/data"; then
  say "etcd on $ETCD_PORT"
  as_postgres mkdir -p "$STATE/etcd"
  rm -f "$STATE/etcd/etcd.pid"
  spawn "$STATE/etcd/etcd.pid" "$STATE/etcd/etcd.log" etcd --name ha --data-dir "$STATE/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "ha=http://127.0.0.1:$((ETCD_PORT + 1))"
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
fi

# --- pgBackRest ---------------------------------------------------------------------------
# One repository for the cluster. Both nodes are listed: a backup is taken from whichever is
# primary. Each node has a copy naming itself first, for its archive_command.
cat >"$STATE/pgbackrest.conf" <<EOF
[global]
repo1-path=$STATE/backrest
repo1-retention-full=2
log-path=$STATE/backrest-log
lock-path=$STATE/backrest-lock
spool-path=$STATE/backrest-spool
log-level-console=warn
log-level-file=info
start-fast=y
archive-timeout=30

[wallet]
pg1-path=$STATE/node1/data
pg1-port=${PG_PORT[node1]}
pg1-socket-path=$STATE/node1
pg2-path=$STATE/node2/data
pg2-port=${PG_PORT[node2]}
pg2-socket-path=$STATE/node2
EOF
as_postgres mkdir -p "$STATE/backrest" "$STATE/backrest-log" "$STATE/backrest-lock" "$STATE/backrest-spool"
for n in "${NODES[@]}"; do
  as_postgres mkdir -p "$STATE/$n"
  { sed '/^\[wallet\]/,$d' "$STATE/pgbackrest.conf"
    printf '[wallet]\npg1-path=%s\npg1-port=%s\npg1-socket-path=%s\n' "$STATE/$n/data" "${PG_PORT[$n]}" "$STATE/$n"
  } >"$STATE/$n/pgbackrest.conf"
done

# --- Patroni nodes ------------------------------------------------------------------------
node_config() { # name
  local n=$1
  cat <<EOF
scope: wallet
name: $n
log:
  dir: $STATE/$n
  level: INFO
restapi:
  listen: 127.0.0.1:${REST_PORT[$n]}
  connect_address: 127.0.0.1:${REST_PORT[$n]}
etcd3:
  hosts: 127.0.0.1:$ETCD_PORT
bootstrap:
  dcs:
    # A dead primary's leader key expires within ttl; replicas look every loop_wait.
    ttl: 8
    loop_wait: 1
    retry_timeout: 3
    # How far behind a replica may be and still be promoted. A synchronous standby holds
    # every acknowledged commit, so with synchronous_mode on this only decides whether a
    # stalled standby may take over at all; with it off, it bounds what a failover loses.
    maximum_lag_on_failover: 67108864
    synchronous_mode: $([[ $HA_SYNC == on ]] && echo true || echo false)
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_connections: 300
        max_wal_senders: 8
        max_replication_slots: 8
        wal_keep_size: 256MB
        archive_mode: "on"
        archive_timeout: 60
        # The drills kill processes, not kernels: what a killed postmaster wrote is in the
        # page cache either way. fsync guards a machine's power, which no drill here cuts.
        fsync: "off"
        full_page_writes: "on"
  initdb:
    - encoding: UTF8
    - data-checksums
  pg_hba:
    - local all all trust
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:${PG_PORT[$n]}
  connect_address: 127.0.0.1:${PG_PORT[$n]}
  data_dir: $STATE/$n/data
  bin_dir: $BIN
  pgpass: $STATE/$n/pgpass
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: postgres, password: postgres}
    rewind: {username: postgres, password: postgres}
  parameters:
    unix_socket_directories: $STATE/$n
    # Each node archives as itself (pgBackRest checks that pg1-path is the data directory
    # it runs in); whichever is primary pushes.
    archive_command: pgbackrest --config=$STATE/$n/pgbackrest.conf --stanza=wallet archive-push %p
  # A killed primary rejoins rewound by pg_rewind from the WAL the new primary still keeps
  # (wal_keep_size); when that fails, Patroni removes its data and clones it again.
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  create_replica_methods: [basebackup]
  basebackup:
    - checkpoint: fast
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
  nosync: false
EOF
}

start_node() { # name
  local n=$1
  if alive "$STATE/$n/patroni.pid" "$STATE/$n/patroni.yml"; then return; fi
  as_postgres mkdir -p "$STATE/$n"
  chmod 700 "$STATE/$n" 2>/dev/null || true
  node_config "$n" >"$STATE/$n/patroni.yml"
  [[ $(id -u) == 0 ]] && chown postgres:postgres "$STATE/$n/patroni.yml"
  # A postmaster orphaned by a killed Patroni would hold the port: a machine that died
  # takes its PostgreSQL with it. (The pid must still be that postmaster: a pid file may
  # outlive its process, and the number be reused.)
  if [[ -f $STATE/$n/data/postmaster.pid ]]; then
    local pm
    pm=$(head -n1 "$STATE/$n/data/postmaster.pid")
    if grep -qF -- "$STATE/$n/data" "/proc/$pm/cmdline" 2>/dev/null; then
      pkill -9 -P "$pm" 2>/dev/null || true
      kill -9 "$pm" 2>/dev/null || true
    fi
  fi
  say "Patroni $n (PostgreSQL ${PG_PORT[$n]}, REST ${REST_PORT[$n]})"
  rm -f "$STATE/$n/patroni.pid"
  spawn "$STATE/$n/patroni.pid" "$STATE/$n/patroni.out" patroni "$STATE/$n/patroni.yml"
}

role_of() { # name -> primary | replica | "" (down or starting)
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${REST_PORT[$1]}/primary" 2>/dev/null || true)
  if [[ $code == 200 ]]; then echo primary; return; fi
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${REST_PORT[$1]}/replica" 2>/dev/null || true)
  [[ $code == 200 ]] && echo replica || true
}

for n in "${NODES[@]}"; do
  start_node "$n"
  # The first node bootstraps the cluster; the second clones it once it leads.
  [[ $n == node1 ]] && wait_for "a primary" 90 bash -c "curl -fs http://127.0.0.1:${REST_PORT[node1]}/primary || curl -fs http://127.0.0.1:${REST_PORT[node2]}/primary"
done

# Synchronous mode on or off, as asked: the dynamic configuration lives in etcd.
as_postgres patronictl -c "$STATE/node1/patroni.yml" edit-config --force \
  -s "synchronous_mode=$([[ $HA_SYNC == on ]] && echo true || echo false)" >/dev/null

# Both nodes up, one primary, one streaming replica; in synchronous mode, the replica is
# the synchronous standby (the primary then commits nothing it alone holds).
ready() {
  local roles="" n
  for n in "${NODES[@]}"; do roles+="$(role_of "$n") "; done
  [[ $roles == "primary replica " || $roles == "replica primary " ]] || return 1
  local primary
  for n in "${NODES[@]}"; do [[ $(role_of "$n") == primary ]] && primary=$n; done
  local want=async
  [[ $HA_SYNC == on ]] && want=sync
  [[ $(psql -h 127.0.0.1 -p "${PG_PORT[$primary]}" -U postgres -Atc \
    "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null) == "$want" ]]
}
wait_for "a primary with a streaming $([[ $HA_SYNC == on ]] && echo synchronous || echo asynchronous) replica" 180 ready

# --- HAProxy ------------------------------------------------------------------------------
# Patroni's REST API answers GET /primary 200 on the leader alone and GET /replica on a
# streaming replica; a node marked down has its sessions cut, so no connection lingers on
# a demoted or dead primary.
cat >"$STATE/haproxy.cfg" <<EOF
global
  maxconn 2000
  pidfile $STATE/haproxy.pid
  log stdout format raw local0 notice

defaults
  mode tcp
  log global
  timeout connect 1s
  timeout client 30m
  timeout server 30m
  timeout check 1s

listen primary
  bind 127.0.0.1:$RW_PORT
  option httpchk
  http-check send meth GET uri /primary
  http-check expect status 200
  default-server inter 500ms fastinter 250ms fall 2 rise 1 on-marked-down shutdown-sessions
  server node1 127.0.0.1:${PG_PORT[node1]} check port ${REST_PORT[node1]}
  server node2 127.0.0.1:${PG_PORT[node2]} check port ${REST_PORT[node2]}

listen replicas
  bind 127.0.0.1:$RO_PORT
  balance roundrobin
  option httpchk
  http-check send meth GET uri /replica
  http-check expect status 200
  default-server inter 500ms fastinter 250ms fall 2 rise 1 on-marked-down shutdown-sessions
  server node1 127.0.0.1:${PG_PORT[node1]} check port ${REST_PORT[node1]}
  server node2 127.0.0.1:${PG_PORT[node2]} check port ${REST_PORT[node2]}
EOF
if ! alive "$STATE/haproxy.pid" "$STATE/haproxy.cfg"; then
  say "HAProxy: read-write $RW_PORT, read-only $RO_PORT"
  haproxy -D -f "$STATE/haproxy.cfg" >>"$STATE/haproxy.log" 2>&1
fi
wait_for "HAProxy's read-write port" 30 psql -h 127.0.0.1 -p "$RW_PORT" -U postgres -Atc "SELECT NOT pg_is_in_recovery()" -v ON_ERROR_STOP=1
psql -h 127.0.0.1 -p "$RW_PORT" -U postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'wallet'" | grep -q 1 \
  || psql -h 127.0.0.1 -p "$RW_PORT" -U postgres -qc "CREATE DATABASE wallet"

# --- the pgBackRest stanza ----------------------------------------------------------------
if [[ ! -f $STATE/backrest/backup/wallet/backup.info ]]; then
  say "pgBackRest stanza 'wallet'"
  as_postgres pgbackrest --config="$STATE/pgbackrest.conf" --stanza=wallet stanza-create >/dev/null
fi

# --- Redis Cluster ------------------------------------------------------------------------
say "Redis Cluster (three masters, a replica each) on $REDIS_PORT.."
REDIS_SEEDS=$(bash tests/scaled/redis-cluster.sh "$STATE/redis" "$REDIS_PORT" 3 1)

cat >"$STATE/env" <<EOF
export WALLET_HA_STATE=$STATE
export WALLET_HA_DATABASE_URL=postgres://postgres@127.0.0.1:$RW_PORT/wallet
export WALLET_HA_REPLICA_URL=postgres://postgres@127.0.0.1:$RO_PORT/wallet
export WALLET_HA_REDIS_URL=$REDIS_SEEDS
export WALLET_HA_SYNC=$HA_SYNC
EOF
primary=""
for n in "${NODES[@]}"; do [[ $(role_of "$n") == primary ]] && primary=$n; done
say "ready: primary $primary, synchronous_mode $HA_SYNC; source $STATE/env"
