#!/usr/bin/env bash
# What TLS costs (issue 32), each pair in the same run on the same machine, interleaved:
#
# 1. RESP: redis-benchmark RL.REDUCE/s against a gateway's plaintext RESP listener and one
#    with [gateway.resp_tls] (redis-benchmark --tls), -P 16, 50 clients.
# 2. gRPC: ShouldRateLimit/s (server/loadtest/grpc_load.rs, 16 streams) plaintext against
#    [gateway.grpc_tls].
# 3. The Redis backend: TG.CHECK/s through a gateway whose buckets are in a redis-server
#    over redis:// against one over rediss:// (the same server's --tls-port).
# 4. Handshakes on the proxy's TLS listener: `openssl s_time` full handshakes per second,
#    and resumed ones (session resumption is on).
#
#   bash server/loadtest/tls.sh     # ROUNDS=3 REQUESTS=500000
#
# Servers on core 0, load generators on core 1. Certificates are made here with the
# openssl CLI. Needs redis-server, redis-benchmark, openssl and taskset.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-500000}
GRPC_REQUESTS=${GRPC_REQUESTS:-100000}
for tool in redis-server redis-benchmark openssl taskset; do
  command -v "$tool" >/dev/null || { echo "server/loadtest/tls.sh needs $tool" >&2; exit 1; }
done
cargo build --release -p tollgate-server --bin tollgate --example grpc_load
source loadtest/lib.sh
work=$(mktemp -d)
trap 'cleanup_pids; rm -rf "$work"' EXIT
machine 2>/dev/null || true

# A CA and a certificate for localhost / 127.0.0.1 it signs.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca-key.pem" -out "$work/ca.pem" \
  -days 2 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$work/req.pem" \
  -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$work/ext"
openssl x509 -req -in "$work/req.pem" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
  -CAcreateserial -out "$work/cert.pem" -days 2 -extfile "$work/ext" 2>/dev/null
tls_table() { # table
  printf '[gateway.%s]\ncert_file = "%s"\nkey_file = "%s"\n' "$1" "$work/cert.pem" "$work/key.pem"
}
rules='[limits]
"/" = "1000000000/s"
'
printf '%s' "$rules" >"$work/plain.toml"
{ printf '%s' "$rules"; tls_table resp_tls; tls_table grpc_tls; tls_table tls; } >"$work/tls.toml"

gateway=target/release/tollgate
start 0 redis-server --port 18601 --tls-port 18602 --bind 127.0.0.1 --save "" --appendonly no \
  --tls-cert-file "$work/cert.pem" --tls-key-file "$work/key.pem" \
  --tls-ca-cert-file "$work/ca.pem" --tls-auth-clients no >/dev/null
start 0 "$gateway" --config "$work/plain.toml" --listen 127.0.0.1:18610 --admin 127.0.0.1:18611 \
  --resp 127.0.0.1:18612 --grpc 127.0.0.1:18613 2>/dev/null
start 0 "$gateway" --config "$work/tls.toml" --listen 127.0.0.1:18620 --admin 127.0.0.1:18621 \
  --resp 127.0.0.1:18622 --grpc 127.0.0.1:18623 2>/dev/null
for backend in redis rediss; do
  port=18601; [ "$backend" = rediss ] && port=18602
  printf '[store]\nbackend = "redis"\nurl = "%s://localhost:%s"\nkey_prefix = "%s:"\n[store.tls]\nca_file = "%s"\n%s' \
    "$backend" "$port" "$backend" "$work/ca.pem" "$rules" >"$work/$backend.toml"
  [ "$backend" = redis ] && sed -i '/^\[store.tls\]/,/^ca_file/d' "$work/$backend.toml"
done
start 0 "$gateway" --config "$work/redis.toml" --listen 127.0.0.1:18630 --admin 127.0.0.1:18631 \
  --resp 127.0.0.1:18632 2>/dev/null
start 0 "$gateway" --config "$work/rediss.toml" --listen 127.0.0.1:18640 --admin 127.0.0.1:18641 \
  --resp 127.0.0.1:18642 2>/dev/null
for port in 18601 18602 18612 18613 18622 18623 18620 18632 18642; do wait_port "$port"; done

bench() { # redis-benchmark arguments... -> requests per second
  taskset -c 1 redis-benchmark -c 50 -P 16 -n "$REQUESTS" -q "$@" 2>/dev/null \
    | tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i <= NF; i++) if ($i == "requests") print $(i - 1) }' | tail -1
}
grpc() { # port [ca] -> requests per second
  # grpc_load prints: requests per second, p50 µs, p99 µs, over-limit count.
  taskset -c 1 target/release/examples/grpc_load "127.0.0.1:$1" decide 16 "$GRPC_REQUESTS" ${2:+"$2"} 2>/dev/null \
    | awk '{ print $1; exit }'
}
report() { # name, plain values, tls values
  local plain tls
  plain=$(printf '%s\n' $2 | median); tls=$(printf '%s\n' $3 | median)
  awk -v n="$1" -v p="$plain" -v t="$tls" 'BEGIN { printf "   %-34s plain %10.0f/s   TLS %10.0f/s   TLS/plain %.2f\n", n, p, t, t / p }'
}

resp_plain=(); resp_tls=(); grpc_plain=(); grpc_tls=(); redis_plain=(); redis_tls=()
for round in $(seq "$ROUNDS"); do
  resp_plain+=("$(bench -p 18612 RL.REDUCE bench 1000000000 1)")
  resp_tls+=("$(bench -p 18622 --tls --cacert "$work/ca.pem" RL.REDUCE bench 1000000000 1)")
  grpc_plain+=("$(grpc 18613)")
  grpc_tls+=("$(grpc 18623 "$work/ca.pem")")
  redis_plain+=("$(bench -p 18632 TG.CHECK api/203.0.113.7)")
  redis_tls+=("$(bench -p 18642 TG.CHECK api/203.0.113.7)")
  echo "   round $round: RESP ${resp_plain[-1]} / ${resp_tls[-1]}, gRPC ${grpc_plain[-1]} / ${grpc_tls[-1]}, Redis backend ${redis_plain[-1]} / ${redis_tls[-1]}"
done
echo "== medians of $ROUNDS interleaved rounds"
report "RESP RL.REDUCE (-P 16, 50 clients)" "${resp_plain[*]}" "${resp_tls[*]}"
report "gRPC ShouldRateLimit (16 streams)" "${grpc_plain[*]}" "${grpc_tls[*]}"
report "Redis backend, TG.CHECK via RESP" "${redis_plain[*]}" "${redis_tls[*]}"

echo "== handshakes on the proxy's TLS listener (openssl s_time, 5 s each, one client on core 1)"
for mode in new reuse; do
  # s_time's second "connections in" line counts real seconds.
  out=$(taskset -c 1 openssl s_time -connect 127.0.0.1:18620 -CAfile "$work/ca.pem" -"$mode" -time 5 2>/dev/null \
    | awk '/connections in .* real seconds/ { printf "%d connections in %s s: %.0f handshakes/s", $1, $4, $1 / $4 }')
  echo "   $mode (${mode/new/full handshakes}): $out"
done
