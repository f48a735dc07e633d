#!/usr/bin/env bash
# axum "hello" with no limiter, with tollgate's layer and with tower_governor's layer, each
# with a quota that never denies and one that denies almost everything, on loopback.
#
#   bash loadtest/axum.sh               # ROUNDS=3 DURATION=5s CONNECTIONS=32 REQUESTS=5000
#   MEASURE=instructions VARIANTS="bare never,tollgate never" bash loadtest/axum.sh
#   MEASURE=instructions SERVE_ARGS=--idle-thread VARIANTS="bare never,governor never,tollgate-no-headers never" bash loadtest/axum.sh
#                                       # SERVE_ARGS: passed to each server (--idle-thread: every
#                                       # variant multi-threaded, as on tokio's multi-thread runtime)
#   MEASURE=instructions LOAD_ARGS=--chat VARIANTS="bare never,tollgate-reserve never,tollgate-estimate never" bash loadtest/axum.sh
#                                       # LOAD_ARGS: passed to the fixed-count load (--chat: POST a 2 KiB chat body)
#
# Two measurements of the same six servers (loadtest/hello.rs, one thread each):
#
# 1. Throughput and latency with wrk: the server on core 0, wrk on core 1, the variants
#    interleaved (bare, tollgate, tollgate without headers, governor, then the denying
#    pair; again) ROUNDS times; medians and ratios to bare, and each server's CPU time per
#    request (user + system from /proc while wrk ran). Wall-clock figures on a shared machine drift, so read the ratios.
# 2. Instructions per request under valgrind's callgrind, which counts instructions rather
#    than time and repeats to within a few instructions whatever else the machine does.
#    After 200 warm-up requests (first bucket, lazy clock calibration) the counters are
#    zeroed, REQUESTS requests are sent over one keep-alive connection and the counters
#    dumped; then again with 2 x REQUESTS. The difference over REQUESTS is the cost of one
#    request with every constant (connection set-up, the zero and dump) subtracted; minus
#    bare's figure, it is what each limiter adds per request.
#
# Needs wrk, valgrind and taskset (apt-get install -y wrk valgrind util-linux). The
# callgrind outputs are kept in $KEEP (if set) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNECTIONS=${CONNECTIONS:-32}
REQUESTS=${REQUESTS:-5000}
PORT=18090

for tool in wrk valgrind callgrind_control taskset; do
  command -v "$tool" >/dev/null || { echo "loadtest/axum.sh needs $tool (apt-get install -y wrk valgrind)" >&2; exit 1; }
done

cargo build --release --example bench_hello
bin=$PWD/target/release/examples/bench_hello
source loadtest/lib.sh
work=$(mktemp -d)
trap 'cleanup_pids; rm -rf "$work"' EXIT

IFS=, read -r -a variants <<<"${VARIANTS:-bare never,tollgate never,tollgate-no-headers never,governor never,tollgate deny,governor deny}"
MEASURE=${MEASURE:-throughput instructions}
name() { echo "${1/ never/}" | sed 's/ deny/-denying/'; }

machine
if [[ $MEASURE == *throughput* ]]; then
echo
echo "== throughput: $ROUNDS interleaved rounds of $DURATION per variant, $CONNECTIONS connections, server on core 0, wrk on core 1"
results="$work/wrk"
: > "$results"
for round in $(seq "$ROUNDS"); do
  for variant in "${variants[@]}"; do
    # shellcheck disable=SC2086 # the variant and SERVE_ARGS are words on purpose
    start 0 "$bin" serve $variant ${SERVE_ARGS:-} --listen "127.0.0.1:$PORT" 2>/dev/null
    server=${pids[-1]}
    wait_port $PORT
    echo "$(name "$variant") $(run_wrk "http://127.0.0.1:$PORT/" "$server")" | tee -a "$results" | sed 's/^/   raw: /'
    kill -TERM "$server"; wait "$server" 2>/dev/null || true
  done
done
echo "   variant              median req/s    vs bare   p50 ms   p99 ms   CPU µs/request   non-2xx"
bare_rps=$(awk '$1 == "bare" { print $2 }' "$results" | median)
for variant in "${variants[@]}"; do
  n=$(name "$variant")
  rps=$(awk -v n="$n" '$1 == n { print $2 }' "$results" | median)
  p50=$(awk -v n="$n" '$1 == n { print $3 }' "$results" | median)
  p99=$(awk -v n="$n" '$1 == n { print $4 }' "$results" | median)
  bad=$(awk -v n="$n" '$1 == n { print $5 }' "$results" | median)
  cpu=$(awk -v n="$n" '$1 == n { print $6 }' "$results" | median)
  awk -v n="$n" -v r="$rps" -v b="$bare_rps" -v p50="$p50" -v p99="$p99" -v bad="$bad" -v cpu="$cpu" \
    'BEGIN { printf "   %-20s %12.0f    x%.2f   %6.3f   %6.3f   %14.2f   %s\n", n, r, r / b, p50, p99, cpu, bad }'
done

fi

# Instructions the server executes for `count` requests after warm-up (callgrind).
instructions() { # count, variant words...
  local count=$1; shift
  local out="$work/callgrind.$(name "$*").$count"
  # shellcheck disable=SC2086 # SERVE_ARGS are words
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve "$@" ${SERVE_ARGS:-} --listen "127.0.0.1:$PORT" 2>/dev/null &
  local server=$!
  pids+=("$server")
  wait_port $PORT 600
  "$bin" load --target "127.0.0.1:$PORT" --requests 200 ${LOAD_ARGS:-} 2>/dev/null
  callgrind_control --zero "$server" >/dev/null 2>&1
  "$bin" load --target "127.0.0.1:$PORT" --requests "$count" ${LOAD_ARGS:-} 2>"$work/load"
  callgrind_control --dump "$server" >/dev/null 2>&1
  kill -TERM "$server"; wait "$server" 2>/dev/null || true
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$out.1" "$KEEP/callgrind.$(name "$*").$count"; }
  awk '/^summary:/ { print $2 }' "$out.1"
}

[[ $MEASURE == *instructions* ]] || exit 0
echo
echo "== instructions per request (callgrind): ($REQUESTS more requests) / $REQUESTS, one keep-alive connection"
echo "   variant              per request   added over bare   statuses"
bare_ir=
for variant in "${variants[@]}"; do
  # shellcheck disable=SC2086
  small=$(instructions "$REQUESTS" $variant)
  # shellcheck disable=SC2086
  large=$(instructions "$((2 * REQUESTS))" $variant)
  statuses=$(sed 's/.*requests: //' "$work/load")
  per=$(( (large - small) / REQUESTS ))
  [ -n "$bare_ir" ] || bare_ir=$per
  printf '   %-20s %11d   %+15d   %s\n' "$(name "$variant")" "$per" "$((per - bare_ir))" "$statuses"
done
