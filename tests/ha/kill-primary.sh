#!/usr/bin/env bash
# The machine of the primary dies: SIGKILL to its Patroni, its postmaster and every
# PostgreSQL process under it, at once, with nothing flushed or handed over. Patroni on the
# replica then waits out the leader key's ttl and promotes itself.
#
#   bash tests/ha/kill-primary.sh [STALL_MS]
#
# STALL_MS (default 0): first stop the primary's WAL sender (SIGSTOP) for that long, as a
# congested link between zones would hold WAL back, then kill the primary. With synchronous
# replication the primary acknowledges no commit meanwhile; without it, it acknowledges
# commits that only it holds, and they die with it. (Stopping the replica's receiver instead
# would not do: the sender goes on filling the replica's socket buffer, and the replica
# reads it all once it resumes.)
# Prints one JSON line: the node killed and the instant (Unix milliseconds).
set -euo pipefail
STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
STALL_MS=${1:-0}
declare -A REST_PORT=([node1]=58008 [node2]=58009)

primary=""
for n in node1 node2; do
  if curl -fs -o /dev/null "http://127.0.0.1:${REST_PORT[$n]}/primary"; then primary=$n; fi
done
[[ -n $primary ]] || { echo "no primary to kill" >&2; exit 1; }

postmaster_of() { head -n1 "$STATE/$1/data/postmaster.pid"; }
pm=$(postmaster_of "$primary")
if ((STALL_MS > 0)); then
  sender=$(pgrep -P "$pm" -f walsender || true)
  [[ -n $sender ]] || { echo "the primary $primary has no WAL sender to stall" >&2; exit 1; }
  # shellcheck disable=SC2086
  kill -STOP $sender
  sleep "$(awk "BEGIN { print $STALL_MS / 1000 }")"
fi

children=$(pgrep -P "$pm" | tr '\n' ' ')
at=$(date +%s%3N)
# shellcheck disable=SC2086
kill -9 "$(cat "$STATE/$primary/patroni.pid")" "$pm" $children 2>/dev/null || true
printf '{"killed":"%s","at_ms":%s,"stalled_ms":%s}\n' "$primary" "$at" "$STALL_MS"
