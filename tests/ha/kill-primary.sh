#!/usr/bin/env bash
# The machine of the primary dies: SIGKILL to its Patroni, its postmaster and every
# PostgreSQL process under it, at once, with nothing flushed or handed over. Patroni on the
# replica then waits out the leader key's ttl and promotes itself.
#
#   bash tests/ha/kill-primary.sh [STALL_MS]
#
# STALL_MS (default 0): first stop the replica's WAL receiver (SIGSTOP) for that long, as a
# congested link between zones would, then kill the primary, then let the receiver go on.
# With synchronous replication the primary acknowledges no commit meanwhile; without it,
# it acknowledges commits only it holds, and they die with it.
# Prints one JSON line: the node killed and the instant (Unix milliseconds).
set -euo pipefail
STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
STALL_MS=${1:-0}
declare -A REST_PORT=([node1]=58008 [node2]=58009)

primary="" replica=""
for n in node1 node2; do
  if curl -fs -o /dev/null "http://127.0.0.1:${REST_PORT[$n]}/primary"; then primary=$n; else replica=$n; fi
done
[[ -n $primary ]] || { echo "no primary to kill" >&2; exit 1; }

postmaster_of() { head -n1 "$STATE/$1/data/postmaster.pid"; }
receiver=""
if ((STALL_MS > 0)); then
  receiver=$(pgrep -P "$(postmaster_of "$replica")" -f walreceiver || true)
  [[ -n $receiver ]] || { echo "the replica $replica has no WAL receiver to stall" >&2; exit 1; }
  kill -STOP "$receiver"
  sleep "$(awk "BEGIN { print $STALL_MS / 1000 }")"
fi

pm=$(postmaster_of "$primary")
children=$(pgrep -P "$pm" | tr '\n' ' ')
at=$(date +%s%3N)
# shellcheck disable=SC2086
kill -9 "$(cat "$STATE/$primary/patroni.pid")" "$pm" $children 2>/dev/null || true
[[ -n $receiver ]] && kill -CONT "$receiver"
printf '{"killed":"%s","at_ms":%s,"stalled_ms":%s}\n' "$primary" "$at" "$STALL_MS"
