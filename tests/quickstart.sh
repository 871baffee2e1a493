#!/usr/bin/env bash
# Runs the README's "First sandbox payment" section exactly as written: its shell blocks are
# extracted from README.md (not copied here), the one marked `sh server` is started in the
# background, the others run in order in one bash session with -euo pipefail, so every
# command must succeed. Against a fresh embedded server: its own data directory, a free
# port (WALLET is the only thing set beforehand; the README defaults it to :8080) and a
# free port for the webhook receiver, substituted for the README's 8090.
#
#   bash tests/quickstart.sh        (from anywhere; prints each block and the total time)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
for tool in curl jq python3; do
  command -v "$tool" >/dev/null || { echo "quickstart needs $tool" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wallet-quickstart.XXXXXX")
SERVER_PID="" STEPS_PID=""
# The server (cargo run and the wallet-api it starts) and the steps (with the receiver they
# start) each run in a process group of their own, so stopping a group stops everything in it.
stop_group() {
  local pgid=$1
  kill -TERM -- "-$pgid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 -- "-$pgid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
}
cleanup() {
  [[ -n $STEPS_PID ]] && stop_group "$STEPS_PID"
  [[ -n $SERVER_PID ]] && stop_group "$SERVER_PID"
  [[ -n ${KEEP_QUICKSTART:-} ]] || rm -rf "$WORK" || true
}
trap cleanup EXIT

# The section's blocks: ```sh server and ```sh, up to the next "## " heading.
python3 - "$ROOT/README.md" "$WORK" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
start = text.index("\n## First sandbox payment\n")
end = text.find("\n## ", start + 1)
section = text[start:end if end != -1 else len(text)]
blocks = re.findall(r"^```sh( server)?\n(.*?)^```$", section, flags=re.S | re.M)
servers = [b for tag, b in blocks if tag]
steps = [b for tag, b in blocks if not tag]
assert len(servers) == 1 and steps, "the section has one `sh server` block and shell steps"
open(f"{sys.argv[2]}/server.sh", "w").write(servers[0])
open(f"{sys.argv[2]}/steps.sh", "w").write("\n".join(steps))
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
HOOK_PORT=$(free_port)
export WALLET="http://127.0.0.1:$PORT/v1"
# The receiver's port is the only text that changes: 8090 is the README's.
sed -i "s/8090/$HOOK_PORT/g" "$WORK/steps.sh"

started=$(date +%s%N)
echo "== server (README block 'sh server'), data in $WORK/data"
WALLET_DATA_DIR="$WORK/data" WALLET_LISTEN_ADDR="127.0.0.1:$PORT" WALLET_METRICS_LISTEN_ADDR=127.0.0.1:0 \
  setsid bash -c "$(cat "$WORK/server.sh")" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
# After `cargo test --workspace` the first `cargo run -p api` only links (one feature set for
# both commands, suite::build); a checkout built by nothing yet compiles for some minutes
# first: allow up to 20.
for _ in $(seq 1 2400); do
  curl -sf "$WALLET/health" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; echo "the server exited" >&2; exit 1; }
  sleep 0.5
done
curl -sf "$WALLET/health" >/dev/null || { tail -n 30 "$WORK/server.log" >&2; exit 1; }

echo "== steps"
export TMPDIR="$WORK"
WALLET_DATA_DIR="$WORK/data" setsid bash -euo pipefail -x "$WORK/steps.sh" >"$WORK/steps.out" 2>"$WORK/steps.err" &
STEPS_PID=$!
if ! wait "$STEPS_PID"; then
  cat "$WORK/steps.out"
  tail -n 40 "$WORK/steps.err" >&2
  echo "== server log (tail)" >&2
  tail -n 20 "$WORK/server.log" >&2
  exit 1
fi
cat "$WORK/steps.out"
echo "quickstart: every command succeeded in $((($(date +%s%N) - started) / 1000000)) ms (server start included)"
