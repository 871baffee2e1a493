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
declare -A REST_PORT=([node1]=28008 [node2]=28009)

primary=""
for n in node1 node2; do
  if curl -fs -o /dev/null "http://127.0.0.1:${REST_PORT[$n]}/primary"; then primary=$n; fi
done
[[ -n $primary ]] || { echo "no primary to kill" >&2; exit 1; }

postmaster_of() { head -n1 "$STATE/$1/data/postmaster.pid"; }
# Every process under a pid, children first found before anything is killed (a killed
# parent's children move to init and out of reach).
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
pm=$(postmaster_of "$primary")
grep -qF -- "$STATE/$primary/data" "/proc/$pm/cmdline" 2>/dev/null \
  || { echo "pid $pm is not $primary's postmaster" >&2; exit 1; }
patroni=$(cat "$STATE/$primary/patroni.pid")
grep -qF -- "$STATE/$primary/patroni.yml" "/proc/$patroni/cmdline" 2>/dev/null \
  || { echo "pid $patroni is not $primary's Patroni" >&2; exit 1; }
if ((STALL_MS > 0)); then
  sender=$(pgrep -P "$pm" -f walsender || true)
  [[ -n $sender ]] || { echo "the primary $primary has no WAL sender to stall" >&2; exit 1; }
  # shellcheck disable=SC2086
  kill -STOP $sender
  sleep "$(awk "BEGIN { print $STALL_MS / 1000 }")"
fi

# The whole machine: Patroni, the postmaster and everything under either (backends, the
# WAL sender, the archiver and the archive-push it may be running).
victims="$patroni $pm $(descendants "$patroni" | tr '\n' ' ') $(descendants "$pm" | tr '\n' ' ')"
at=$(date +%s%3N)
# shellcheck disable=SC2086
kill -9 $victims 2>/dev/null || true
# Its pid files name dead processes now; a later pid may reuse the numbers.
rm -f "$STATE/$primary/patroni.pid" "$STATE/$primary/data/postmaster.pid"
printf '{"killed":"%s","at_ms":%s,"stalled_ms":%s}\n' "$primary" "$at" "$STALL_MS"
