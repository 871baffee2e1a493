#!/usr/bin/env bash
# Schemathesis, every check, against a fresh service started from this tree's wallet-api:
# embedded by default; production when WALLET_TEST_DATABASE_URL and WALLET_TEST_REDIS_URL
# are set (a fresh database of its own, a Redis prefix of its own). The credentials it
# sends: a sandbox tenant's platform key (x-api-key), a terminal JWT of its merchant
# (Authorization) and an operator key (x-operator-key), so every operation's own scheme is
# present. Prints schemathesis's summary; exits with its status.
#
# Its configuration (schemathesis.toml) and hooks (hooks.py) sit beside it. Every check
# runs (schemathesis 4's default; a `--checks` list on the command line would override the
# per-operation settings of the configuration), except that the built-in
# positive_data_acceptance is replaced by hooks.py's, which also passes the refusals the
# contract makes for rules JSON Schema cannot state (each listed with its reason).
#
#   bash tests/schemathesis/run.sh                 (ST_EXAMPLES=20 examples per operation)
#   ST_EXAMPLES=200 bash tests/schemathesis/run.sh (the long run)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
VENV=$(bash tests/venv.sh)
[[ -x $VENV/bin/schemathesis ]] || { echo "schemathesis missing from $VENV (tests/requirements.txt)" >&2; exit 2; }
cargo build -q -p api --bin wallet-api
API=${CARGO_TARGET_DIR:-$ROOT/target}/debug/wallet-api

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wallet-schemathesis.XXXXXX")
SERVER_PID="" DB=""
cleanup() {
  [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  if [[ -n $DB ]]; then psql "$WALLET_TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true; fi
  [[ -n ${KEEP_SCHEMATHESIS:-} ]] || rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export WALLET_DATA_DIR=$WORK/data WALLET_LISTEN_ADDR=127.0.0.1:$PORT
# Generated requests arrive far faster than a till's: the limits are not under test here.
export WALLET_RATE_LIMIT=1000000 WALLET_RATE_LIMIT_SANDBOX=1000000
# Its authentication checks call every operator route with made-up keys from one address:
# the failed sign-in budget is not under test here either (suite::console_sign_in is).
export WALLET_OPS_SIGN_IN_FAILURES_PER_CLIENT=1000000 WALLET_OPS_SIGN_IN_FAILURES_PER_PREFIX=1000000
# The cheapest bcrypt cost the service accepts, as the suite's own services use: operator calls
# verify their key with bcrypt every time (no cache), and those are many here.
export WALLET_BCRYPT_COST=10
mode=embedded
if [[ -n ${WALLET_TEST_DATABASE_URL:-} && -n ${WALLET_TEST_REDIS_URL:-} ]]; then
  mode=production
  DB=wallet_st_$$_$RANDOM
  psql "$WALLET_TEST_DATABASE_URL" -qc "CREATE DATABASE $DB" >/dev/null
  export WALLET_DATABASE_URL="${WALLET_TEST_DATABASE_URL%/*}/$DB"
  export WALLET_REDIS_URL=$WALLET_TEST_REDIS_URL WALLET_REDIS_PREFIX="st-$$-$RANDOM:"
  export WALLET_REDIS_MODE=${WALLET_TEST_REDIS_MODE:-standalone}
  export WALLET_JWT_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
  export WALLET_SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
  export WALLET_RUN_WORKERS=true # one process: the jobs run inside the API
  "$API" migrate >"$WORK/migrate.log" 2>&1
fi
"$API" serve >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
BASE=http://127.0.0.1:$PORT/v1
for _ in $(seq 1 300); do curl -sf "$BASE/health" >/dev/null 2>&1 && break; sleep 0.2; done

TENANT=$("$API" tenant create --name schemathesis --sandbox --currency EUR --json)
KEY=$(jq -r .platform_key <<<"$TENANT")
MERCHANT=$(jq -r .merchant_id <<<"$TENANT")
OPERATOR=$("$API" operator create --name schemathesis --json | jq -r .operator_key)
TOKEN=$(curl -sS -X POST "$BASE/auth/token" -H "x-api-key: $KEY" -H "Idempotency-Key: $(python3 -c 'import uuid; print(uuid.uuid4())')" \
  -H 'Content-Type: application/json' \
  -d "{\"meta\": {\"api_version\": \"2026-06-01\", \"partner_request_id\": \"$(python3 -c 'import uuid; print(uuid.uuid4())')\"}, \"context\": {\"merchant_id\": \"$MERCHANT\"}}" \
  | jq -er .data.token)

echo "schemathesis against $mode mode at $BASE (${ST_EXAMPLES:-20} examples per operation)"
set +e
cd "$WORK" # schemathesis keeps a cache of what failed in its working directory
SCHEMATHESIS_HOOKS=$HERE/hooks.py "$VENV/bin/schemathesis" --config-file "$HERE/schemathesis.toml" --no-color \
  run "$BASE/openapi.json" --exclude-checks positive_data_acceptance \
  --max-examples "${ST_EXAMPLES:-20}" ${ST_SEED:+--seed "$ST_SEED"} \
  -H "x-api-key: $KEY" -H "Authorization: Bearer $TOKEN" -H "x-operator-key: $OPERATOR" \
  "$@" | tee "$WORK/schemathesis.out"
status=${PIPESTATUS[0]}
set -e
exit "$status"
