#!/usr/bin/env bash
# Stops what tests/ha/up.sh started (Patroni and its PostgreSQL nodes, etcd, HAProxy, the
# Redis Cluster, any cluster a PITR drill restored) and removes its state dir.
set -uo pipefail
STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
stop() { # pidfile, signal
  [[ -f $1 ]] || return 0
  local pid
  pid=$(cat "$1")
  kill "-${2:-TERM}" "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
}
# Patroni stops its PostgreSQL on SIGTERM.
for n in node1 node2; do stop "$STATE/$n/patroni.pid"; done
for d in "$STATE"/*/data "$STATE"/restore*/data; do
  [[ -f $d/postmaster.pid ]] || continue
  pm=$(head -n1 "$d/postmaster.pid")
  kill -9 "$pm" 2>/dev/null && pkill -9 -P "$pm" 2>/dev/null
done
stop "$STATE/haproxy.pid"
stop "$STATE/etcd/etcd.pid"
for pidfile in "$STATE"/redis/*/redis.pid; do
  [[ -f $pidfile ]] && redis-cli -p "$(basename "$(dirname "$pidfile")")" shutdown nosave >/dev/null 2>&1
done
rm -rf "$STATE"
