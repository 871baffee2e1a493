#!/usr/bin/env bash
# Starts a Redis Cluster on loopback from Debian's redis-server (installed if missing):
#   bash tests/scaled/redis-cluster.sh DIR FIRST_PORT [MASTERS=3] [REPLICAS_PER_MASTER=0]
# Nodes listen on FIRST_PORT, FIRST_PORT+1, ... and each node's cluster bus on its port +
# 10000: keep both below the kernel's ephemeral range (32768 and up on Linux), where an
# outgoing connection may hold the port (seen: a bus port in TIME-WAIT); each keeps its nodes.conf under DIR/<port>
# (so a restarted node rejoins with its slots) and nothing else on disk. Prints the seed
# URLs, comma-separated, as WALLET_REDIS_URL takes them. Idempotent: a whole cluster is
# left as it is, and a node that died is started again. Stop it with: redis-cli -p <port> shutdown nosave
# for each port (tests/scaled/down.sh does).
set -euo pipefail
DIR=$1 FIRST=$2 MASTERS=${3:-3} REPLICAS=${4:-0}
N=$((MASTERS * (1 + REPLICAS)))
say() { printf '[redis-cluster] %s\n' "$*" >&2; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  say "installing redis-server (Debian's package)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools) >/dev/null
fi

(( FIRST + N - 1 <= 55535 )) || { say "ports must be at most 55535 (the cluster bus is port + 10000)"; exit 2; }
ports=() seeds=()
for ((i = 0; i < N; i++)); do
  ports+=($((FIRST + i)))
  seeds+=("redis://127.0.0.1:$((FIRST + i))")
done

# Every node answering and the cluster whole: nothing to do. A node that was killed is
# started again below and rejoins from its nodes.conf (as a replica, once its replica
# took over).
all_up=1
for p in "${ports[@]}"; do redis-cli -p "$p" ping >/dev/null 2>&1 || all_up=0; done
if ((all_up)) && [[ $(redis-cli -p "$FIRST" cluster info 2>/dev/null | tr -d '\r' | grep cluster_state) == cluster_state:ok ]]; then
  (IFS=,; echo "${seeds[*]}")
  exit 0
fi

for p in "${ports[@]}"; do
  mkdir -p "$DIR/$p"
  if ! redis-cli -p "$p" ping >/dev/null 2>&1; then
    # A node that stops answering for a second is failed over (when it has a replica, and
    # however long ago that replica last heard from it); slots whose node is down fail
    # alone, the rest of the cluster keeps serving.
    redis-server --port "$p" --bind 127.0.0.1 --daemonize yes --dir "$DIR/$p" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000 \
      --cluster-require-full-coverage no --cluster-replica-validity-factor 0 \
      --save "" --appendonly no \
      --logfile "$DIR/$p/redis.log" --pidfile "$DIR/$p/redis.pid"
  fi
done
for p in "${ports[@]}"; do
  for _ in $(seq 1 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

for p in "${ports[@]}"; do
  redis-cli -p "$p" ping >/dev/null 2>&1 || { say "node $p did not start:"; tail -n 5 "$DIR/$p/redis.log" >&2; exit 1; }
done
if [[ $(redis-cli -p "$FIRST" cluster info | tr -d '\r' | grep cluster_known_nodes) != "cluster_known_nodes:$N" ]]; then
  say "creating the cluster: $MASTERS masters, $REPLICAS replica(s) each"
  addrs=()
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$REPLICAS" --cluster-yes >"$DIR/create.log" 2>&1 \
    || { cat "$DIR/create.log" >&2; exit 1; }
fi
for _ in $(seq 1 200); do
  ok=1
  for p in "${ports[@]}"; do
    [[ $(redis-cli -p "$p" cluster info | tr -d '\r' | grep cluster_state) == cluster_state:ok ]] || ok=0
  done
  ((ok)) && break
  sleep 0.1
done
((ok)) || { say "the cluster did not reach cluster_state:ok"; exit 1; }
# Replicas ready to take over: each has its master's data.
for _ in $(seq 1 200); do
  ok=1
  for p in "${ports[@]}"; do
    info=$(redis-cli -p "$p" info replication | tr -d '\r')
    if grep -q '^role:slave' <<<"$info" && ! grep -q '^master_link_status:up' <<<"$info"; then ok=0; fi
  done
  ((ok)) && break
  sleep 0.1
done
((ok)) || { say "the replicas did not finish their first sync"; exit 1; }
(IFS=,; echo "${seeds[*]}")
