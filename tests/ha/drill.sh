#!/usr/bin/env bash
# The failover drill (docs/operations/ha.md). Starts the HA rig (tests/ha/up.sh), runs two
# wallet-api replicas and a wallet-worker on it under eight paying clients, kills the
# primary's machine in the middle (tests/ha/kill-primary.sh) and audits the money
# (api/tests/ha/). Each drill prints one line:
#   failover: lost 0, duplicated 0, first payment after kill Xs, longest retry Ys
#
#   bash tests/ha/drill.sh          short: one kill, HA_DRILL_SECS (30) of payments (CI)
#   bash tests/ha/drill.sh long     the primary killed; the old primary rejoined as the
#                                   replica and the new one killed (roles swapped); a Redis
#                                   master killed; then synchronous replication off and the
#                                   primary killed again, a run that must lose payments
#
# HA_STALL_MS (1000): the primary's WAL sender is stopped this long before each kill, as
# a congested link between zones would stop it. HA_KEEP=1 leaves the rig running.
# Figures: target/ha/drills.jsonl (and $WALLET_HA_STATE/drills.jsonl), one JSON object per drill.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-short}
export WALLET_HA_STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
export HA_DRILL_SECS=${HA_DRILL_SECS:-30}
export HA_STALL_MS=${HA_STALL_MS:-1000}
say() { printf '\n==== %s ====\n' "$*"; }

started=$(date +%s)
rm -f target/ha/drills.jsonl
bash tests/ha/down.sh
# The figures outlive the rig: target/ha/drills.jsonl.
keep_figures() {
  mkdir -p target/ha
  [[ -f $WALLET_HA_STATE/drills.jsonl ]] && cp "$WALLET_HA_STATE/drills.jsonl" target/ha/drills.jsonl
  [[ ${HA_KEEP:-0} == 1 ]] || bash tests/ha/down.sh
}
trap keep_figures EXIT
HA_SYNC=on bash tests/ha/up.sh
cargo test --locked -p api --test ha --no-run 2>&1 | tail -n 1

drill() { # test name; the rig's env must be current
  (
    # shellcheck source=/dev/null
    source "$WALLET_HA_STATE/env"
    cargo test --locked -q -p api --test ha -- --exact "$1" --nocapture --test-threads 1
  )
}
PG=primary::when_the_primarys_machine_dies_the_replica_takes_over_and_no_acknowledged_payment_is_lost
REDIS=redis_master::when_a_redis_master_dies_under_load_its_replica_takes_over_and_nothing_is_lost

say "failover, synchronous replication: the primary's machine dies"
drill "$PG"

if [[ $MODE == long ]]; then
  say "failover, roles swapped: the old primary rejoins as the replica, then the new primary dies"
  HA_SYNC=on bash tests/ha/up.sh
  drill "$PG"

  say "Redis: a master dies under load"
  HA_SYNC=on bash tests/ha/up.sh
  drill "$REDIS"

  say "failover, synchronous replication OFF: the same drill must be able to lose payments"
  HA_SYNC=off bash tests/ha/up.sh
  if drill "$PG"; then
    echo "synchronous replication off lost nothing this time (see drills.jsonl for why)"
  else
    echo "synchronous replication off: the drill failed, as it must be able to"
  fi
fi

say "drills ($(($(date +%s) - started)) s in all)"
python3 - "$WALLET_HA_STATE/drills.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    where = f"synchronous_mode {d['synchronous_mode']}, killed {d['killed']}" if d["drill"] == "failover" else f"killed master {d['killed_master']}"
    print(f"{d['line']}  [{where}; {d['acknowledged_payments']} payments acknowledged]")
EOF
