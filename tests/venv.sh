#!/usr/bin/env bash
# The test suite's Python virtualenv: created under target/ from tests/requirements.txt
# (PyPI) and reinstalled only when that file changes. Prints the virtualenv's directory.
#
#   bash tests/venv.sh        -> e.g. /path/to/repo/target/test-venv
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${WALLET_TEST_VENV:-$ROOT/target/test-venv}
REQ=$ROOT/tests/requirements.txt
stamp=$(sha256sum "$REQ" | cut -d' ' -f1)
# target/ is not there yet when cargo builds elsewhere (CARGO_TARGET_DIR).
mkdir -p "$(dirname "$VENV")"
exec 9>"${VENV%/}.lock"
flock 9 # one installer at a time: parallel tests share the virtualenv
if [[ ! -x $VENV/bin/python || "$(cat "$VENV/.requirements" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
  echo "$stamp" >"$VENV/.requirements"
fi
echo "$VENV"
