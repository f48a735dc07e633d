#!/usr/bin/env bash
# The Redis-protocol front end beside a real redis-server (issue 18): redis-benchmark
# running RL.REDUCE against tollgate and INCR against redis-server, pipelined (-P 16),
# in the same run on the same machine.
#
#   bash server/loadtest/resp.sh        # ROUNDS=5 REQUESTS=2000000 CLIENTS=50 PIPELINE=16
#
# Both servers are pinned to core 0 (redis-server is single-threaded; the gateway's
# runtime threads share that one core), redis-benchmark to core 1. Rounds interleave the
# two; the medians and their ratio are what to read. Needs redis-server, redis-benchmark
# and taskset (apt-get install -y redis-server).
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-2000000}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-16}
REDIS_PORT=18501
RESP_PORT=18502

for tool in redis-server redis-benchmark taskset; do
  command -v "$tool" >/dev/null || { echo "server/loadtest/resp.sh needs $tool (apt-get install -y redis-server)" >&2; exit 1; }
done
cargo build --release -p tollgate-server --bin tollgate
source loadtest/lib.sh
trap cleanup_pids EXIT

machine
start 0 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >/dev/null
start 0 target/release/tollgate --listen 127.0.0.1:18503 --admin 127.0.0.1:18504 \
  --resp "127.0.0.1:$RESP_PORT" 2>/dev/null
wait_port "$REDIS_PORT"; wait_port "$RESP_PORT"

rate() { # port, command words... -> requests per second
  local port=$1; shift
  taskset -c 1 redis-benchmark -p "$port" -c "$CLIENTS" -P "$PIPELINE" -n "$REQUESTS" -q "$@" 2>/dev/null \
    | tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i <= NF; i++) if ($i == "requests") print $(i - 1) }' | tail -1
}

echo "== $ROUNDS interleaved rounds, $REQUESTS requests each, $CLIENTS clients, -P $PIPELINE"
incr=(); reduce=()
for round in $(seq "$ROUNDS"); do
  incr+=("$(rate "$REDIS_PORT" INCR counter)")
  reduce+=("$(rate "$RESP_PORT" RL.REDUCE bench 1000000000 1)")
  echo "   round $round: redis-server INCR ${incr[-1]}/s, tollgate RL.REDUCE ${reduce[-1]}/s"
done
incr_median=$(printf '%s\n' "${incr[@]}" | median)
reduce_median=$(printf '%s\n' "${reduce[@]}" | median)
awk -v i="$incr_median" -v r="$reduce_median" 'BEGIN {
  printf "   median: redis-server INCR %.0f/s, tollgate RL.REDUCE %.0f/s, ratio %.2f\n", i, r, r / i
}'
