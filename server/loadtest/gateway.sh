#!/usr/bin/env bash
# The gateway beside nginx `limit_req`, both proxying to the same upstream, on loopback.
#
#   bash server/loadtest/gateway.sh            # ROUNDS=3 DURATION=10s CONNECTIONS=32 by default
#
# Needs wrk and nginx (apt-get install -y wrk nginx). Core 0 runs the proxy under test and
# the upstream (an nginx worker returning a small body); core 1 runs wrk. Both proxies get
# one worker: nginx `worker_processes 1`, the gateway `TOKIO_WORKER_THREADS=1`. nginx is
# configured fairly: an `upstream` block with keepalive, HTTP/1.1 and a cleared Connection
# header, so it reuses upstream connections as the gateway does. Two scenarios: a quota
# that never denies, and one that denies almost everything (one client, 1 request/s).
# The runs are interleaved (nginx, gateway, nginx, gateway, ...) and medians reported.
# GATEWAY_BIN=path measures that build of the service instead of building this one.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
UPSTREAM_PORT=18081
NGINX_PORT=18082
GATEWAY_PORT=18083
ADMIN_PORT=18084

for tool in wrk nginx taskset; do
  command -v "$tool" >/dev/null || { echo "server/loadtest/gateway.sh needs $tool (apt-get install -y wrk nginx)" >&2; exit 1; }
done

# The service binary: the same program as the gateway example, built from the service's
# own dependencies only.
# GATEWAY_BIN measures another build (an earlier commit's, for a before/after pair).
gateway_bin=${GATEWAY_BIN:-target/release/tollgate}
[ -n "${GATEWAY_BIN:-}" ] || cargo build --release -p tollgate-server --bin tollgate
source loadtest/lib.sh
work=$(mktemp -d)
cleanup() {
  cleanup_pids
  rm -rf "$work"
}
trap cleanup EXIT

# The upstream: a small fixed body.
nginx_conf upstream $UPSTREAM_PORT "server { listen 127.0.0.1:$UPSTREAM_PORT; keepalive_requests 1000000; location / { return 200 'hello from the upstream\n'; } }"
start 0 nginx -c "$work/upstream/nginx.conf"
wait_port $UPSTREAM_PORT

scenario() { # name, nginx rate, nginx burst, gateway rate
  local name=$1 nginx_rate=$2 nginx_burst=$3 gateway_rate=$4
  nginx_conf "proxy-$name" $NGINX_PORT "
  limit_req_zone \$binary_remote_addr zone=clients:10m rate=$nginx_rate;
  limit_req_status 429;
  upstream app { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    keepalive_requests 1000000;
    location / {
      limit_req zone=clients burst=$nginx_burst nodelay;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }
  }"
  printf '[limits]\n"/" = "%s"\n' "$gateway_rate" > "$work/gateway-$name.toml"
  start 0 nginx -c "$work/proxy-$name/nginx.conf"
  local nginx_pid=${pids[-1]}
  TOKIO_WORKER_THREADS=1 RUST_LOG=warn start 0 "$gateway_bin" --config "$work/gateway-$name.toml" \
    --listen "127.0.0.1:$GATEWAY_PORT" --admin "127.0.0.1:$ADMIN_PORT" --upstream "http://127.0.0.1:$UPSTREAM_PORT"
  local gateway_pid=${pids[-1]}
  wait_port $NGINX_PORT
  wait_port $GATEWAY_PORT
  local results="$work/results-$name"
  : > "$results"
  for round in $(seq "$ROUNDS"); do
    echo "nginx $(run_wrk "http://127.0.0.1:$NGINX_PORT/api/item" "$nginx_pid")" >> "$results"
    echo "gateway $(run_wrk "http://127.0.0.1:$GATEWAY_PORT/api/item" "$gateway_pid")" >> "$results"
  done
  kill "$nginx_pid" "$gateway_pid"
  wait "$nginx_pid" "$gateway_pid" 2>/dev/null || true
  echo
  echo "== $name (nginx rate=$nginx_rate burst=$nginx_burst, gateway rate=$gateway_rate): $ROUNDS rounds of $DURATION, $CONNECTIONS connections"
  echo "   columns: requests/s, p50 ms, p99 ms, non-2xx responses, proxy CPU µs per request"
  cat "$results" | sed 's/^/   raw: /'
  local n_rps g_rps n_p99 g_p99 n_p50 g_p50
  n_rps=$(awk '$1 == "nginx" { print $2 }' "$results" | median)
  g_rps=$(awk '$1 == "gateway" { print $2 }' "$results" | median)
  n_p50=$(awk '$1 == "nginx" { print $3 }' "$results" | median)
  g_p50=$(awk '$1 == "gateway" { print $3 }' "$results" | median)
  n_p99=$(awk '$1 == "nginx" { print $4 }' "$results" | median)
  g_p99=$(awk '$1 == "gateway" { print $4 }' "$results" | median)
  local n_bad g_bad n_cpu g_cpu
  n_bad=$(awk '$1 == "nginx" { print $5 }' "$results" | median)
  g_bad=$(awk '$1 == "gateway" { print $5 }' "$results" | median)
  n_cpu=$(awk '$1 == "nginx" { print $6 }' "$results" | median)
  g_cpu=$(awk '$1 == "gateway" { print $6 }' "$results" | median)
  printf '   %-8s median %10.0f req/s   p50 %7.3f ms   p99 %7.3f ms   non-2xx %-8s CPU %6.2f µs/request\n' nginx "$n_rps" "$n_p50" "$n_p99" "$n_bad" "$n_cpu"
  printf '   %-8s median %10.0f req/s   p50 %7.3f ms   p99 %7.3f ms   non-2xx %-8s CPU %6.2f µs/request\n' gateway "$g_rps" "$g_p50" "$g_p99" "$g_bad" "$g_cpu"
  awk -v g="$g_rps" -v n="$n_rps" -v gp="$g_p99" -v np="$n_p99" -v gc="$g_cpu" -v nc="$n_cpu" \
    'BEGIN { printf "   gateway/nginx: throughput x%.2f, p99 x%.2f, CPU per request x%.2f\n", g / n, gp / np, gc / nc }'
}

machine
# nginx's limit_req counts in milliseconds: with a small burst it refuses a second request
# within the same millisecond whatever the rate, so "never denying" needs a large burst.
scenario never-denying "1000000r/s" 1000000 "1000000/s"
scenario mostly-denying "1r/s" 1 "1/s"
