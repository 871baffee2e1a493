#!/usr/bin/env bash
# The point-in-time-recovery drill (docs/operations/ha.md; the runbook's "Restore to a
# moment"). On the HA rig (tests/ha/up.sh), with two wallet-api replicas and a worker under
# eight paying clients: pgBackRest takes a full backup while they pay (tests/ha/backup.sh),
# the drill notes an instant T, the clients pay on, then a NEW cluster is restored to T
# (tests/ha/restore.sh) and checked: every payment acknowledged before T is there, none
# begun after T is, balances match the payments present, `wallet-api ledger check` passes
# and `wallet-api migrate` finds nothing to apply. It prints one line:
#   pitr: restored to T in Xs; N acknowledged before T present, 0 missing; 0 of M begun after T present; ...
#
# HA_DRILL_SECS (30): how long the clients pay. HA_KEEP=1 leaves the rig (and the restored
# cluster, on 127.0.0.1:25534) running.
set -euo pipefail
cd "$(dirname "$0")/../.."
export WALLET_HA_STATE=${WALLET_HA_STATE:-/tmp/wallet-ha}
export HA_DRILL_SECS=${HA_DRILL_SECS:-30}
started=$(date +%s)
# The figures outlive the rig: target/ha/pitr.jsonl.
keep_figures() {
  mkdir -p target/ha
  [[ -f $WALLET_HA_STATE/drills.jsonl ]] && cp "$WALLET_HA_STATE/drills.jsonl" target/ha/pitr.jsonl
  [[ ${HA_KEEP:-0} == 1 ]] || bash tests/ha/down.sh
}
trap keep_figures EXIT
rm -f target/ha/pitr.jsonl
bash tests/ha/down.sh
bash tests/ha/up.sh
(
  # shellcheck source=/dev/null
  source "$WALLET_HA_STATE/env"
  cargo test --locked -q -p api --test ha -- --exact \
    pitr::a_restore_to_an_instant_holds_every_payment_acknowledged_before_it_and_none_begun_after \
    --nocapture --test-threads 1
)
echo "pitr drill: $(($(date +%s) - started)) s in all"
