#!/usr/bin/env bash
# A full pgBackRest backup of the HA rig's cluster, taken from whichever node is primary,
# while the service runs (pgBackRest asks for a fast checkpoint and copies the files; the
# WAL archived meanwhile makes the copy consistent). Prints one JSON line with the seconds
# it took and the backup's label.
#   bash tests/ha/backup.sh [full|diff|incr]
set -euo pipefail
STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
TYPE=${1:-full}
as_postgres() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
started=$(date +%s%3N)
as_postgres pgbackrest --config="$STATE/pgbackrest.conf" --stanza=wallet --type="$TYPE" backup
took=$(($(date +%s%3N) - started))
label=$(as_postgres pgbackrest --config="$STATE/pgbackrest.conf" --stanza=wallet --output=json info \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["backup"][-1]["label"])')
printf '{"type":"%s","label":"%s","took_ms":%s}\n' "$TYPE" "$label" "$took"
