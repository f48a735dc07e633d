#!/usr/bin/env bash
# Streamed server-sent events through the gateway, with and without reading the usage
# from them (`cost = { reserve, from = "json:/usage/total_tokens" }`), on loopback.
#
#   bash server/loadtest/sse.sh        # ROUNDS=3 DURATION=5s CONNECTIONS=8 TOKENS=2000
#
# The gateway proxies POST /v1/chat/completions with "stream": true to its built-in demo
# upstream (in the same process, so each figure includes the upstream's own work, the same
# for both variants): TOKENS words in chunks of 8, each a `data:` event, then one with the
# usage and `[DONE]` (about 60 KB a response at 2000). The two configs differ only in the
# rule's cost: a plain `cost = 1`, or a reservation of 1 settled from the last event's
# usage. Needs wrk and taskset. The gateway runs on core 0 with one worker thread; wrk on
# core 1. Variants interleaved ROUNDS times; medians of responses/s, MB/s and the
# gateway's CPU time per response.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNECTIONS=${CONNECTIONS:-8}
TOKENS=${TOKENS:-2000}
PORT=18091
ADMIN_PORT=18092

for tool in wrk taskset; do
  command -v "$tool" >/dev/null || { echo "server/loadtest/sse.sh needs $tool (apt-get install -y wrk)" >&2; exit 1; }
done

cargo build --release -p tollgate-server --bin tollgate
gateway_bin=$PWD/target/release/tollgate
source loadtest/lib.sh
work=$(mktemp -d)
trap 'cleanup_pids; rm -rf "$work"' EXIT

for variant in plain settled; do
  cost='cost = 1'
  [ "$variant" = settled ] && cost='cost = { reserve = 1, from = "json:/usage/total_tokens" }'
  cat > "$work/$variant.toml" <<CONF
[gateway]
listen = "127.0.0.1:$PORT"
admin = "127.0.0.1:$ADMIN_PORT"
[limits."v1/chat"]
rate = "1000000000/s"
$cost
CONF
done
cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"messages":[{"role":"user","content":"stream"}],"max_tokens":$TOKENS,"stream":true}'
wrk.headers["Content-Type"] = "application/json"
LUA

machine
echo "== $ROUNDS interleaved rounds of $DURATION, $CONNECTIONS connections, $TOKENS tokens a response"
results="$work/results"
: > "$results"
for round in $(seq "$ROUNDS"); do
  for variant in plain settled; do
    TOKIO_WORKER_THREADS=1 start 0 "$gateway_bin" --config "$work/$variant.toml" 2>/dev/null
    gateway=${pids[-1]}
    wait_port $PORT
    before=$(cpu_ticks "$gateway")
    out=$(taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s "$work/post.lua" "http://127.0.0.1:$PORT/v1/chat/completions")
    after=$(cpu_ticks "$gateway")
    rps=$(awk '/^Requests\/sec/ { print $2 }' <<<"$out")
    transfer=$(awk '/^Transfer\/sec/ { v = $2; if (v ~ /GB$/) v *= 1024; else if (v ~ /KB$/) v /= 1024; print v + 0 }' <<<"$out")
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    non2xx=$(awk '/Non-2xx/ { print $5 }' <<<"$out")
    cpu=$(awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
    echo "$variant $rps $transfer $cpu ${non2xx:-0}" | tee -a "$results" | sed 's/^/   raw: /'
    kill -TERM "$gateway"; wait "$gateway" 2>/dev/null || true
  done
done
echo
printf '   %-10s %14s %10s %16s\n' variant responses/s MB/s "CPU us/response"
for variant in plain settled; do
  rps=$(awk -v v="$variant" '$1 == v { print $2 }' "$results" | median)
  mbs=$(awk -v v="$variant" '$1 == v { print $3 }' "$results" | median)
  cpu=$(awk -v v="$variant" '$1 == v { print $4 }' "$results" | median)
  printf '   %-10s %14s %10s %16s\n' "$variant" "$rps" "$mbs" "$cpu"
done
