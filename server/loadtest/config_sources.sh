#!/usr/bin/env bash
# What live configuration costs while nothing changes, and what a repository sees from a
# fleet (issue 17).
#
#   bash server/loadtest/config_sources.sh            # DURATION=60 FLEET=10 BEFORE=aa596d7
#
# 1. An idle gateway over DURATION seconds, before the fix (the gateway built from commit
#    $BEFORE, in target/bench-before) and after it (this tree), in three phases: just
#    started, after one valid save, after one invalid save: CPU time (user + system,
#    /proc/PID/stat), read system calls (/proc/PID/io syscr), reload failures counted
#    (/metrics) and WARN lines logged. Release builds, one after the other, same machine.
# 2. FLEET real gateways polling one document on a local repository (python's http.server,
#    which answers If-Modified-Since with 304) at the default poll interval for DURATION
#    seconds: requests per minute the repository sees, how many were 304, and one polling
#    gateway's CPU time.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-60}
FLEET=${FLEET:-10}
BEFORE=${BEFORE:-aa596d7}
source loadtest/lib.sh
work=$(mktemp -d)
trap 'cleanup_pids; rm -rf "$work"' EXIT

echo "== building: this tree, and $BEFORE in target/bench-before"
cargo build --release -p tollgate-server --bin tollgate
after=$PWD/target/release/tollgate
mkdir -p "$work/before-src"
git archive "$BEFORE" | tar -x -C "$work/before-src"
CARGO_TARGET_DIR="$PWD/target/bench-before" cargo build --release -p tollgate-server --bin tollgate \
  --manifest-path "$work/before-src/Cargo.toml"
before=$PWD/target/bench-before/release/tollgate

machine
io_reads() { awk '/^syscr/ { print $2 }' "/proc/$1/io"; }
failures() { # admin port -> reload failures counted so far
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^tollgate_config_reload_failures_total/ { print $2 }' | head -1
}

# binary label -> "cpu-ms syscr failures warns" over DURATION, idle with a valid config,
# then the same after one invalid save.
idle() {
  local binary=$1 label=$2 dir="$work/$2"
  mkdir -p "$dir"
  cp config/gateway.toml "$dir/gateway.toml"
  "$binary" --config "$dir/gateway.toml" --listen 127.0.0.1:18301 --admin 127.0.0.1:18302 2>"$dir/log" &
  local pid=$!
  pids+=("$pid")
  wait_port 18302
  sleep 2 # start-up done
  for phase in started saved invalid; do
    case "$phase" in
      saved) printf '\n[limits."added"]\nrate = "7/min"\n' >>"$dir/gateway.toml"; sleep 1 ;;
      invalid) printf '\n[limits."broken"]\nrate = "fast"\n' >>"$dir/gateway.toml"; sleep 1 ;;
    esac
    local ticks0 reads0 fails0 warns0
    ticks0=$(cpu_ticks "$pid"); reads0=$(io_reads "$pid"); fails0=$(failures 18302); warns0=$(grep -c WARN "$dir/log" || true)
    sleep "$DURATION"
    local ticks1 reads1 fails1 warns1
    ticks1=$(cpu_ticks "$pid"); reads1=$(io_reads "$pid"); fails1=$(failures 18302); warns1=$(grep -c WARN "$dir/log" || true)
    awk -v l="$label" -v p="$phase" -v t="$((ticks1 - ticks0))" -v hz="$(getconf CLK_TCK)" \
        -v r="$((reads1 - reads0))" -v f="$(( ${fails1:-0} - ${fails0:-0} ))" -v w="$((warns1 - warns0))" -v d="$DURATION" \
      'BEGIN { printf "   %-8s %-13s %10.0f %15d %13d %9d\n", l, p, t * 1000 / hz * 60 / d, r * 60 / d, f * 60 / d, w * 60 / d }'
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo
echo "== an idle gateway, per minute (DURATION=${DURATION}s each)"
echo "   version  idle, after   CPU ms/min  read calls/min  failures/min  WARN/min"
idle "$before" before
idle "$after" after

echo
echo "== $FLEET gateways polling one document at the default interval (10 s), ${DURATION}s"
mkdir -p "$work/repo/fleet"
cp config/limits.toml "$work/repo/fleet/limits.toml"
(cd "$work/repo" && exec python3 -m http.server 18400 --bind 127.0.0.1) 2>"$work/repo.log" &
pids+=($!)
wait_port 18400
for i in $(seq "$FLEET"); do
  "$after" --config http://127.0.0.1:18400/fleet/limits.toml \
    --listen "127.0.0.1:$((18410 + 2 * i))" --admin "127.0.0.1:$((18411 + 2 * i))" 2>/dev/null &
  pids+=($!)
done
for i in $(seq "$FLEET"); do wait_port "$((18411 + 2 * i))"; done
first=${pids[-1]}
: >"$work/repo.log"
ticks0=$(cpu_ticks "$first")
sleep "$DURATION"
ticks1=$(cpu_ticks "$first")
total=$(grep -c '"GET /fleet/limits.toml' "$work/repo.log" || true)
unchanged=$(grep -c '"GET /fleet/limits.toml HTTP/1.1" 304' "$work/repo.log" || true)
awk -v n="$FLEET" -v t="$total" -v u="$unchanged" -v d="$DURATION" -v c="$((ticks1 - ticks0))" -v hz="$(getconf CLK_TCK)" '
  BEGIN {
    printf "   requests seen: %d in %d s = %.1f/min from %d gateways (%.2f/min each), %d of them 304\n", t, d, t * 60 / d, n, t * 60 / d / n, u
    printf "   one polling gateway: %.0f ms CPU per minute\n", c * 1000 / hz * 60 / d
    printf "   at this rate: 50 gateways = %.0f/min, 500 gateways = %.0f/min\n", t * 60 / d / n * 50, t * 60 / d / n * 500
  }'
