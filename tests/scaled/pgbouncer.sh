#!/usr/bin/env bash
# Starts PgBouncer (Debian's package, 1.18) in transaction mode on 127.0.0.1:LISTEN_PORT in
# front of the PostgreSQL server at 127.0.0.1:UPSTREAM_PORT, with its config, log and pid
# under DIR. Every database of the server, as user postgres (trust on loopback). The
# defaults a transaction-mode deployment has: no reset query between clients, so the service
# must leave nothing behind on a server session (api/src/store/db/pooler.rs).
# Used by tests/scaled/up.sh and bench/lib.sh (the "pooled" benchmark mode).
#
# Usage: tests/scaled/pgbouncer.sh DIR LISTEN_PORT UPSTREAM_PORT [POOL_SIZE]
set -euo pipefail
dir=$1 port=$2 upstream=$3 pool=${4:-30}

if ! command -v pgbouncer >/dev/null 2>&1; then
  echo "installing pgbouncer (Debian package)" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer) >/dev/null
fi
as_postgres() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if pg_isready -h 127.0.0.1 -p "$port" -U postgres -d postgres -q 2>/dev/null; then exit 0; fi

mkdir -p "$dir"
cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$upstream user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = transaction
server_reset_query =
server_reset_query_always = 0
max_client_conn = 5000
default_pool_size = $pool
server_idle_timeout = 20
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
admin_users = postgres
INI
[[ $(id -u) == 0 ]] && chown -R postgres:postgres "$dir"
ulimit -n 20000 2>/dev/null || true
as_postgres pgbouncer -d "$dir/pgbouncer.ini"
for _ in $(seq 1 100); do
  pg_isready -h 127.0.0.1 -p "$port" -U postgres -d postgres -q 2>/dev/null && exit 0
  sleep 0.1
done
echo "PgBouncer did not come up on $port (log: $dir/pgbouncer.log)" >&2
exit 1
