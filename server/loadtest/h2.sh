#!/usr/bin/env bash
# HTTP/2 and gRPC through the gateway (issue 48), beside nginx, in one run:
#
# - proxy CPU per request from HTTP/1.1 clients and from h2c clients (one stream per
#   connection, and eight), the same gateway process and the same HTTP/1.1 upstream (an
#   nginx worker returning a small body); nginx in front of the same upstream with
#   `limit_req` (`listen ... http2` for h2c), measured alike. h2load drives both protocols
#   (`--h1` for HTTP/1.1), so the load generator is the same program on each row.
# - gRPC unary calls per second (Envoy's ShouldRateLimit, answered by a tollgate gRPC
#   listener as the upstream) direct, through the gateway (`--upstream-protocol http2`) and
#   through nginx `grpc_pass`, with the proxies' CPU per call.
#
#   bash server/loadtest/h2.sh       # ROUNDS=3 DURATION=10 (seconds) CONNECTIONS=32 CALLS=100000
#
# Core 0 runs the proxies and the upstreams (nginx `worker_processes 1`, the gateway
# `TOKIO_WORKER_THREADS=1`); core 1 runs the load. Rounds are interleaved and medians
# reported. Needs h2load, nginx and taskset (apt-get install -y nghttp2-client nginx-light).
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
CALLS=${CALLS:-100000}
UPSTREAM_PORT=18091
NGINX_H1_PORT=18092
NGINX_H2_PORT=18093
GATEWAY_PORT=18094
GRPC_UPSTREAM_PORT=18095
GRPC_GATEWAY_PORT=18096
GRPC_NGINX_PORT=18097

for tool in h2load nginx taskset; do
  command -v "$tool" >/dev/null || { echo "server/loadtest/h2.sh needs $tool (apt-get install -y nghttp2-client nginx-light)" >&2; exit 1; }
done

cargo build --release -p tollgate-server --bin tollgate --example grpc_load
bin=target/release/tollgate
source loadtest/lib.sh
work=$(mktemp -d)
cleanup() {
  cleanup_pids
  rm -rf "$work"
}
trap cleanup EXIT

# url pid h2load-args... -> "rps cpu-µs-per-request failed"
run_h2load() {
  local url=$1 pid=$2 out before after
  shift 2
  before=$(cpu_ticks "$pid")
  out=$(taskset -c 1 h2load -t 1 -D "$DURATION" --warm-up-time=1 "$@" "$url" 2>&1)
  after=$(cpu_ticks "$pid")
  local rps done_ bad
  rps=$(awk '/^finished in/ { gsub(",", "", $4); print $4 }' <<<"$out")
  done_=$(awk '/^requests:/ { print $8 }' <<<"$out")
  bad=$(awk '/^status codes:/ { print $5 + $7 + $9 }' <<<"$out")
  awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v n="${done_:-0}" -v r="${rps:-0}" -v b="${bad:-0}" \
    'BEGIN { printf "%.0f %.2f %d\n", r, n ? t * 1e6 / hz / n : 0, b }'
}

# address pid -> "calls/s cpu-µs-per-call"
run_grpc() {
  local before after out
  before=$(cpu_ticks "$2")
  out=$(taskset -c 1 target/release/examples/grpc_load "$1" decide 16 "$CALLS")
  after=$(cpu_ticks "$2")
  awk -v o="$out" -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v n="$CALLS" -v p="$2" \
    'BEGIN { split(o, f, " "); printf "%.0f %s\n", f[1], p ? sprintf("%.2f", t * 1e6 / hz / n) : "-" }'
}

machine

# The HTTP upstream, and nginx in front of it on two ports (HTTP/1.1, h2c).
nginx_conf upstream $UPSTREAM_PORT "server { listen 127.0.0.1:$UPSTREAM_PORT; keepalive_requests 1000000; location / { return 200 'hello from the upstream\n'; } }"
start 0 nginx -c "$work/upstream/nginx.conf"
limited="limit_req zone=clients burst=1000000 nodelay;"
nginx_conf proxy $NGINX_H1_PORT "
  limit_req_zone \$binary_remote_addr zone=clients:10m rate=1000000r/s;
  limit_req_status 429;
  upstream app { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_H1_PORT;
    listen 127.0.0.1:$NGINX_H2_PORT http2;
    keepalive_requests 1000000;
    location / { $limited proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
  }"
start 0 nginx -c "$work/proxy/nginx.conf"
nginx_pid=${pids[-1]}
printf '[limits]\n"/" = "1000000/s"\n' > "$work/gateway.toml"
TOKIO_WORKER_THREADS=1 RUST_LOG=warn start 0 "$bin" --config "$work/gateway.toml" \
  --listen "127.0.0.1:$GATEWAY_PORT" --admin 127.0.0.1:0 --upstream "http://127.0.0.1:$UPSTREAM_PORT"
gateway_pid=${pids[-1]}
for port in $UPSTREAM_PORT $NGINX_H1_PORT $NGINX_H2_PORT $GATEWAY_PORT; do wait_port $port; done

echo
echo "== HTTP: $ROUNDS interleaved rounds of ${DURATION}s; columns: requests/s, proxy CPU µs per request, non-2xx"
results="$work/http"
: > "$results"
h1=(--h1 -c "$CONNECTIONS")
h2_1=(-c "$CONNECTIONS" -m 1)
h2_8=(-c $((CONNECTIONS / 8)) -m 8)
for round in $(seq "$ROUNDS"); do
  echo "nginx-h1 $(run_h2load "http://127.0.0.1:$NGINX_H1_PORT/api/item" "$nginx_pid" "${h1[@]}")" >> "$results"
  echo "gateway-h1 $(run_h2load "http://127.0.0.1:$GATEWAY_PORT/api/item" "$gateway_pid" "${h1[@]}")" >> "$results"
  echo "nginx-h2c $(run_h2load "http://127.0.0.1:$NGINX_H2_PORT/api/item" "$nginx_pid" "${h2_1[@]}")" >> "$results"
  echo "gateway-h2c $(run_h2load "http://127.0.0.1:$GATEWAY_PORT/api/item" "$gateway_pid" "${h2_1[@]}")" >> "$results"
  echo "nginx-h2c-x8 $(run_h2load "http://127.0.0.1:$NGINX_H2_PORT/api/item" "$nginx_pid" "${h2_8[@]}")" >> "$results"
  echo "gateway-h2c-x8 $(run_h2load "http://127.0.0.1:$GATEWAY_PORT/api/item" "$gateway_pid" "${h2_8[@]}")" >> "$results"
done
sed 's/^/   raw: /' "$results"
col() { awk -v r="$1" -v c="$2" '$1 == r { print $c }' "$results" | median; }
for row in h1 h2c h2c-x8; do
  awk -v row="$row" -v gr="$(col "gateway-$row" 2)" -v gc="$(col "gateway-$row" 3)" -v nr="$(col "nginx-$row" 2)" -v nc="$(col "nginx-$row" 3)" \
    'BEGIN { printf "   %-7s gateway %8.0f req/s %6.2f µs/request   nginx %8.0f req/s %6.2f µs/request   gateway/nginx CPU x%.2f\n", row, gr, gc, nr, nc, gc / nc }'
done
awk -v h1="$(col gateway-h1 3)" -v h2="$(col gateway-h2c 3)" -v h8="$(col gateway-h2c-x8 3)" \
  'BEGIN { printf "   gateway h2c/HTTP/1.1 CPU per request: x%.2f (one stream a connection), x%.2f (eight)\n", h2 / h1, h8 / h1 }'
kill "$gateway_pid" "$nginx_pid"

# gRPC: a tollgate gRPC listener as the upstream, direct, through the gateway and nginx.
printf '[limits]\n"edge/remote_address" = "1000000000/min"\n' > "$work/grpc-upstream.toml"
TOKIO_WORKER_THREADS=1 RUST_LOG=warn start 0 "$bin" --config "$work/grpc-upstream.toml" \
  --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc "127.0.0.1:$GRPC_UPSTREAM_PORT"
printf '[limits]\n"/" = "1000000000/min"\n' > "$work/grpc-gateway.toml"
TOKIO_WORKER_THREADS=1 RUST_LOG=warn start 0 "$bin" --config "$work/grpc-gateway.toml" \
  --listen "127.0.0.1:$GRPC_GATEWAY_PORT" --admin 127.0.0.1:0 \
  --upstream "http://127.0.0.1:$GRPC_UPSTREAM_PORT" --upstream-protocol http2
grpc_gateway_pid=${pids[-1]}
nginx_conf grpc $GRPC_NGINX_PORT "
  limit_req_zone \$binary_remote_addr zone=clients:10m rate=1000000r/s;
  upstream grpcapp { server 127.0.0.1:$GRPC_UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$GRPC_NGINX_PORT http2;
    keepalive_requests 1000000;
    location / { $limited grpc_pass grpc://grpcapp; }
  }"
start 0 nginx -c "$work/grpc/nginx.conf"
grpc_nginx_pid=${pids[-1]}
for port in $GRPC_UPSTREAM_PORT $GRPC_GATEWAY_PORT $GRPC_NGINX_PORT; do wait_port $port; done
taskset -c 1 target/release/examples/grpc_load "127.0.0.1:$GRPC_GATEWAY_PORT" decide 16 20000 >/dev/null

echo
echo "== gRPC unary calls (ShouldRateLimit), 16 streams on one connection, $CALLS calls, $ROUNDS interleaved rounds; columns: calls/s, proxy CPU µs per call"
results="$work/grpc-results"
: > "$results"
for round in $(seq "$ROUNDS"); do
  echo "direct $(run_grpc "127.0.0.1:$GRPC_UPSTREAM_PORT" "")" >> "$results"
  echo "gateway $(run_grpc "127.0.0.1:$GRPC_GATEWAY_PORT" "$grpc_gateway_pid")" >> "$results"
  echo "nginx $(run_grpc "127.0.0.1:$GRPC_NGINX_PORT" "$grpc_nginx_pid")" >> "$results"
done
sed 's/^/   raw: /' "$results"
awk -v d="$(col direct 2)" -v g="$(col gateway 2)" -v n="$(col nginx 2)" -v gc="$(col gateway 3)" -v nc="$(col nginx 3)" \
  'BEGIN { printf "   direct %.0f calls/s; through the gateway %.0f (x%.2f of direct, %.2f µs CPU per call); through nginx grpc_pass %.0f (x%.2f, %.2f µs); gateway/nginx CPU x%.2f\n", d, g, g / d, gc, n, n / d, nc, gc / nc }'
