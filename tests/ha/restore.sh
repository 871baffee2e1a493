#!/usr/bin/env bash
# Point-in-time recovery of the HA rig's cluster into a NEW cluster (the running nodes are
# not touched): pgBackRest restores the latest backup taken before TARGET and PostgreSQL
# replays the archived WAL up to TARGET, then promotes. The restored cluster listens on
# 127.0.0.1:$RESTORE_PORT (25534). These are the runbook's commands
# (docs/operations/runbook.md, "Restore to a moment").
#   bash tests/ha/restore.sh 'TARGET'    TARGET: '2026-11-30 07:00:00.123456+00'
# Prints one JSON line: the port, and the milliseconds the restore and the replay took.
set -euo pipefail
STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
TARGET=$1
PORT=${RESTORE_PORT:-25534}
DIR=$STATE/restore
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
as_postgres() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if [[ -f $DIR/data/postmaster.pid ]]; then
  as_postgres "$BIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
fi
rm -rf "$DIR"
as_postgres mkdir -p "$DIR/data"
chmod 700 "$DIR/data"
# The repository's settings, with the new cluster as the only PostgreSQL it knows.
sed '/^\[wallet\]/,$d' "$STATE/pgbackrest.conf" >"$DIR/pgbackrest.conf"
printf '[wallet]\npg1-path=%s/data\n' "$DIR" >>"$DIR/pgbackrest.conf"

started=$(date +%s%3N)
as_postgres pgbackrest --config="$DIR/pgbackrest.conf" --stanza=wallet restore \
  --type=time --target="$TARGET" --target-action=promote --target-timeline=latest
restored=$(date +%s%3N)
# The restored files carry the node's Patroni-written settings; the new cluster gets its own
# port and socket, archives nothing and waits for no standby (it is a copy to read, not a
# member of the cluster).
as_postgres "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 300 start \
  -o "-c port=$PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$DIR -c archive_mode=off -c synchronous_standby_names= -c hba_file=$DIR/data/pg_hba.conf -c ident_file=$DIR/data/pg_ident.conf" >/dev/null
for _ in $(seq 1 1200); do
  [[ $(psql -h 127.0.0.1 -p "$PORT" -U postgres -Atc "SELECT pg_is_in_recovery()" 2>/dev/null) == f ]] && break
  sleep 0.25
done
[[ $(psql -h 127.0.0.1 -p "$PORT" -U postgres -Atc "SELECT pg_is_in_recovery()") == f ]] \
  || { tail -n 20 "$DIR/postgres.log" >&2; echo "recovery did not end" >&2; exit 1; }
done_at=$(date +%s%3N)
printf '{"port":%s,"restore_ms":%s,"replay_ms":%s}\n' "$PORT" "$((restored - started))" "$((done_at - restored))"
