#!/usr/bin/env bash
# The gRPC front end (issue 19): decisions per second and p50/p99 latency through the
# gateway's Envoy rate limit service at 1, 16 and 64 streams in flight on one HTTP/2
# connection, beside grpc.health.v1 Check — the same round trip with no rate-limit work —
# measured in the same run, interleaved.
#
#   bash server/loadtest/grpc.sh        # ROUNDS=3 REQUESTS=100000 STREAMS="1 16 64"
#
# The gateway is pinned to core 0 (its runtime threads share it), the load generator
# (server/loadtest/grpc_load.rs) to core 1. The rule never refuses (a billion a minute): what is
# measured is the decision path, not denials. Needs taskset.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-100000}
STREAMS=${STREAMS:-"1 16 64"}
GRPC_PORT=18511

command -v taskset >/dev/null || { echo "server/loadtest/grpc.sh needs taskset" >&2; exit 1; }
cargo build --release -p tollgate-server --bin tollgate --example grpc_load
source loadtest/lib.sh
trap cleanup_pids EXIT

config=$(mktemp --suffix=.toml)
printf '[limits]\n"edge/remote_address" = "1000000000/min"\n' >"$config"

machine
start 0 target/release/tollgate --config "$config" --listen 127.0.0.1:18512 \
  --admin 127.0.0.1:18513 --grpc "127.0.0.1:$GRPC_PORT" 2>/dev/null
wait_port "$GRPC_PORT"

load() { # mode streams -> "rps p50-us p99-us over-limit"
  taskset -c 1 target/release/examples/grpc_load "127.0.0.1:$GRPC_PORT" "$1" "$2" "$REQUESTS"
}

# Warm up: connections, the first buckets, the allocator.
load decide 16 20000 >/dev/null

echo "== $ROUNDS interleaved rounds, $REQUESTS requests each; columns: per second, p50 µs, p99 µs"
for streams in $STREAMS; do
  health=(); decide=(); health_p99=(); decide_p99=(); decide_p50=(); health_p50=()
  for round in $(seq "$ROUNDS"); do
    read -r rps p50 p99 _ <<<"$(load health "$streams")"
    health+=("$rps"); health_p50+=("$p50"); health_p99+=("$p99")
    read -r rps p50 p99 over <<<"$(load decide "$streams")"
    decide+=("$rps"); decide_p50+=("$p50"); decide_p99+=("$p99")
    echo "   $streams streams, round $round: health ${health[-1]}/s p99 ${health_p99[-1]} µs; ShouldRateLimit ${decide[-1]}/s p50 $p50 µs p99 $p99 µs (over limit: $over)"
  done
  m() { printf '%s\n' "$@" | median; }
  awk -v s="$streams" -v h="$(m "${health[@]}")" -v hp5="$(m "${health_p50[@]}")" -v hp9="$(m "${health_p99[@]}")" \
      -v d="$(m "${decide[@]}")" -v dp5="$(m "${decide_p50[@]}")" -v dp9="$(m "${decide_p99[@]}")" 'BEGIN {
    printf "   median, %d streams: ShouldRateLimit %.0f/s (p50 %.1f µs, p99 %.1f µs); health %.0f/s (p50 %.1f µs, p99 %.1f µs); decisions/health %.2f\n", s, d, dp5, dp9, h, hp5, hp9, d / h
  }'
done
rm -f "$config"
