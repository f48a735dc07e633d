#!/usr/bin/env bash
# Reports the RLQS front end handles per second per core (issue 50): the gateway on core 0
# (`TOKIO_WORKER_THREADS=1`) serving --rlqs, `rlqs_load` on core 1 playing STREAMS Envoys
# that each report BUCKETS buckets per report as fast as the server takes them, REPORTS in
# all. Per round: reports/s, bucket usages/s, and reports per second of the gateway's CPU
# (user + system), so a figure does not depend on the load generator keeping up.
#
#   bash server/loadtest/rlqs.sh       # ROUNDS=3 STREAMS=8 BUCKETS=10 REPORTS=200000
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
STREAMS=${STREAMS:-8}
BUCKETS=${BUCKETS:-10}
REPORTS=${REPORTS:-200000}
PORT=18098

command -v taskset >/dev/null || { echo "server/loadtest/rlqs.sh needs taskset (util-linux)" >&2; exit 1; }
cargo build --release -p tollgate-server --bin tollgate --example rlqs_load
bin=${GATEWAY_BIN:-target/release/tollgate}
source loadtest/lib.sh
work=$(mktemp -d)
trap 'cleanup_pids; rm -rf "$work"' EXIT
printf '[limits]\napi = "1000/s"\n[rlqs]\nkey = ["client"]\n' > "$work/rlqs.toml"

machine
echo "| round | reports/s | bucket usages/s | reports per gateway CPU-second | assignments sent |"
echo "|---|---|---|---|---|"
per_cpu=()
for round in $(seq "$ROUNDS"); do
  TOKIO_WORKER_THREADS=1 RUST_LOG=warn start 0 "$bin" --config "$work/rlqs.toml" \
    --listen 127.0.0.1:0 --admin 127.0.0.1:0 --rlqs "127.0.0.1:$PORT" 2>/dev/null
  gateway=${pids[-1]}
  wait_port "$PORT"
  before=$(cpu_ticks "$gateway")
  read -r rate usages assignments < <(taskset -c 1 target/release/examples/rlqs_load \
    "127.0.0.1:$PORT" "$STREAMS" "$BUCKETS" "$REPORTS")
  after=$(cpu_ticks "$gateway")
  ticks=$((after - before))
  hz=$(getconf CLK_TCK)
  cpu=$(awk -v t="$ticks" -v hz="$hz" 'BEGIN { printf "%.3f", t / hz }')
  each=$(awk -v n="$REPORTS" -v c="$cpu" 'BEGIN { printf "%.0f", (c > 0 ? n / c : 0) }')
  per_cpu+=("$each")
  echo "| $round | $rate | $usages | $each | $assignments |"
  kill "$gateway"; wait "$gateway" 2>/dev/null || true
done
echo "median reports per gateway CPU-second: $(printf '%s\n' "${per_cpu[@]}" | median)"
