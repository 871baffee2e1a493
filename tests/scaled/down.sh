#!/usr/bin/env bash
# Stops what tests/scaled/up.sh started (PostgreSQL, PgBouncer, the Redis Cluster) and
# removes its state dir.
set -uo pipefail
STATE=${WALLET_SCALED_STATE:-/tmp/wallet-scaled}
as_postgres() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
BIN=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
[[ -f $STATE/pgbouncer/pgbouncer.pid ]] && kill "$(cat "$STATE/pgbouncer/pgbouncer.pid")" 2>/dev/null
for d in replica primary; do
  [[ -f $STATE/$d/postmaster.pid ]] && as_postgres "$BIN/pg_ctl" -D "$STATE/$d" -m fast -w stop >/dev/null 2>&1
done
for pidfile in "$STATE"/redis/*/redis.pid; do
  [[ -f $pidfile ]] && redis-cli -p "$(basename "$(dirname "$pidfile")")" shutdown nosave >/dev/null 2>&1
done
rm -rf "$STATE"
