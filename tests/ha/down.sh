#!/usr/bin/env bash
# Stops what tests/ha/up.sh started (Patroni and its PostgreSQL nodes, etcd, HAProxy, the
# Redis Cluster, any cluster a PITR drill restored) and removes its state dir.
set -uo pipefail
STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
# The pid in `pidfile` if it is still the program named by `pattern` (a pid file left by a
# killed process may name a pid reused since).
live_pid() { # pidfile, pattern
  [[ -f $1 ]] || return 1
  local pid
  pid=$(head -n1 "$1")
  grep -qF -- "$2" "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}
stop() { # pidfile, pattern
  local pid
  pid=$(live_pid "$1" "$2") || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
}
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
# Patroni stops its PostgreSQL on SIGTERM.
for n in node1 node2; do stop "$STATE/$n/patroni.pid" "$STATE/$n/patroni.yml"; done
# A postmaster left behind (its Patroni killed), or a restored cluster: it and everything
# under it.
for d in "$STATE"/node1/data "$STATE"/node2/data "$STATE"/restore/data; do
  pm=$(live_pid "$d/postmaster.pid" "$d") || continue
  # shellcheck disable=SC2046
  kill -9 "$pm" $(descendants "$pm") 2>/dev/null
done
stop "$STATE/haproxy.pid" "$STATE/haproxy.cfg"
stop "$STATE/etcd/etcd.pid" "$STATE/etcd/data"
for pidfile in "$STATE"/redis/*/redis.pid; do
  [[ -f $pidfile ]] && redis-cli -p "$(basename "$(dirname "$pidfile")")" shutdown nosave >/dev/null 2>&1
done
rm -rf "$STATE"
