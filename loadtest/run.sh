#!/usr/bin/env bash
# Every benchmark in one go, release builds, results under loadtest/results/<date>/.
#
#   bash loadtest/run.sh                 # all suites
#   bash loadtest/run.sh memory redis    # only some: criterion envoy memory redis scale reload adaptive axum gateway config resp grpc
#
# Each suite measures its baselines in the same run (governor, redis-benchmark, nginx), so
# read ratios, not absolute figures: this shared 2-core machine drifts by tens of percent.
# The axum suite needs wrk and valgrind, the gateway suite wrk and nginx, the redis suite redis-server and redis-benchmark
# (apt-get install -y wrk nginx redis-server); a suite whose tools are missing is skipped
# with a message. Transcribe results into BENCHMARKS.md with the command that made them.
set -euo pipefail
cd "$(dirname "$0")/.."

suites=("$@")
[ "${#suites[@]}" -gt 0 ] || suites=(criterion envoy memory redis scale reload adaptive axum gateway config resp grpc)
out="loadtest/results/$(date -u +%F-%H%M)"
mkdir -p "$out"

have() { command -v "$1" >/dev/null 2>&1; }

for suite in "${suites[@]}"; do
  echo "== $suite"
  case "$suite" in
    criterion) cargo bench --bench decision 2>&1 | tee "$out/criterion.txt" ;;
    envoy)     cargo bench --bench envoy 2>&1 | tee "$out/envoy.txt" ;;
    grpc)      bash server/loadtest/grpc.sh 2>&1 | tee "$out/grpc.txt" ;;
    memory)    cargo bench --bench memory 2>&1 | tee "$out/memory.txt" ;;
    reload)    cargo bench --bench reload 2>&1 | tee "$out/reload.txt" ;;
    adaptive)  cargo bench --bench adaptive 2>&1 | tee "$out/adaptive.txt" ;;
    redis)
      if have redis-server && have redis-benchmark; then
        cargo bench --bench redis 2>&1 | tee "$out/redis.txt"
      else
        echo "skipped: needs redis-server and redis-benchmark (apt-get install -y redis-server)"
      fi ;;
    scale)
      if have redis-server && have redis-cli; then
        cargo bench --bench hybrid 2>&1 | tee "$out/hybrid.txt"
        cargo bench --bench scale_out 2>&1 | tee "$out/scale_out.txt"
      else
        echo "skipped: needs redis-server and redis-cli (apt-get install -y redis-server redis-tools)"
      fi ;;
    axum)
      if have wrk && have valgrind; then
        KEEP="$out/callgrind" bash loadtest/axum.sh 2>&1 | tee "$out/axum.txt"
      else
        echo "skipped: needs wrk and valgrind (apt-get install -y wrk valgrind)"
      fi ;;
    gateway)
      if have wrk && have nginx; then
        bash server/loadtest/gateway.sh 2>&1 | tee "$out/gateway.txt"
      else
        echo "skipped: needs wrk and nginx (apt-get install -y wrk nginx)"
      fi ;;
    overhead)
      if have wrk && have valgrind && have nginx; then
        bash loadtest/overhead.sh 2>&1 | tee "$out/overhead.txt"
      else
        echo "skipped: needs wrk, valgrind and nginx (apt-get install -y wrk valgrind nginx)"
      fi ;;
    config)
      if have python3 && have curl; then
        bash server/loadtest/config_sources.sh 2>&1 | tee "$out/config.txt"
      else
        echo "skipped: needs python3 and curl"
      fi ;;
    resp)
      if have redis-server && have redis-benchmark; then
        bash server/loadtest/resp.sh 2>&1 | tee "$out/resp.txt"
      else
        echo "skipped: needs redis-server and redis-benchmark (apt-get install -y redis-server)"
      fi ;;
    *) echo "unknown suite $suite (criterion envoy memory redis scale reload adaptive axum gateway overhead config resp grpc)" >&2; exit 2 ;;
  esac
done
echo "== results in $out"
